package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"

	"github.com/nexuspdp/nexus/bundle"
)

// Engine evaluates the loaded bundle's entrypoints. It is safe for
// concurrent use; Load swaps bundles atomically.
type Engine struct {
	cfg    Config
	cur    atomic.Pointer[policy]
	mu     sync.Mutex // serialises Load and Close
	closed atomic.Bool
	wd     *watchdog
	cache  wazero.CompilationCache // shared by the bundles' runtimes
	stats  counters
}

// New returns an engine with no bundle loaded. It fails if ctx is already
// done; ctx is not kept: the engine runs until Close.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("engine: new: %w", err)
	}
	e := &Engine{cfg: cfg, wd: newWatchdog(), cache: wazero.NewCompilationCache()}
	go e.wd.run()
	return e, nil
}

// Load compiles b's module, parses its data once and makes it the bundle
// evaluations use. Evaluations in flight finish on the previous bundle; none
// fails because of the swap. On error the previous bundle stays loaded.
func (e *Engine) Load(ctx context.Context, b *bundle.Bundle) error {
	if b == nil {
		return fmt.Errorf("%w: nil bundle", ErrInvalidBundle)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Load() {
		return ErrClosed
	}
	p, err := newPolicy(ctx, &e.cfg, e.wd, e.cache, &e.stats, b)
	if err != nil {
		return err
	}
	old := e.cur.Swap(p)
	e.cfg.Logger.InfoContext(ctx, "engine: bundle loaded", "revision", p.revision, "entrypoints", len(p.entrypoints),
		"load_time", p.loadTime, "instance_bytes", p.instanceBytes())
	if old != nil {
		old.retire()
	}
	return nil
}

// Close releases the loaded bundle; evaluations in flight finish first.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	e.wd.close()
	defer e.cache.Close(ctx)
	if old := e.cur.Swap(nil); old != nil {
		old.retire()
	}
	return nil
}

// Revision is the revision of the loaded bundle ("" if none).
func (e *Engine) Revision() string {
	if p := e.cur.Load(); p != nil {
		return p.revision
	}
	return ""
}

// Entrypoints lists the loaded bundle's entrypoints.
func (e *Engine) Entrypoints() []string {
	p := e.cur.Load()
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(p.entrypoints))
	for k := range p.entrypoints {
		out = append(out, k)
	}
	return out
}

// Stats describes the loaded bundle.
type Stats struct {
	Revision string
	// LoadNanos is how long Load took (compile, instantiate, parse data).
	LoadNanos int64
	// InstanceBytes is the memory of a fresh instance.
	InstanceBytes uint64
	// SnapshotBytes is the part of it copied into each new instance.
	SnapshotBytes int
	// InstancesCreated counts instances made from snapshots (all bundles);
	// InstancesDiscarded those dropped after an error or for size, of
	// which InstancesOversized for size.
	InstancesCreated, InstancesDiscarded, InstancesOversized int64
}

// Stats reports on the loaded bundle and the engine's instances.
func (e *Engine) Stats() Stats {
	st := Stats{InstancesCreated: e.stats.created.Load(), InstancesDiscarded: e.stats.discarded.Load(), InstancesOversized: e.stats.oversized.Load()}
	if p := e.cur.Load(); p != nil {
		st.Revision, st.LoadNanos, st.InstanceBytes, st.SnapshotBytes = p.revision, p.loadTime.Nanoseconds(), p.instanceBytes(), len(p.snapshot)
	}
	return st
}

// Eval evaluates entrypoint ("nexus/authz/allow") against input (JSON; nil
// or empty means no input) and appends the JSON of the result to dst. It
// returns ErrUndefined when the result is undefined and an *EvalError when
// evaluation did not complete (invalid input, deadline, memory, abort,
// builtin error). With a dst of sufficient capacity and builtins that do
// not allocate, a steady-state evaluation allocates nothing.
//
// The input is read in Go and written into the policy instance's memory
// as the values of OPA's Wasm runtime (see EvalInput); input that is not
// valid UTF-8 JSON is rejected with an *EvalError of code
// CodeInvalidInput (matching ErrInvalidInput) before it reaches the
// policy.
func (e *Engine) Eval(ctx context.Context, entrypoint string, input []byte, dst []byte) ([]byte, error) {
	if !utf8.Valid(input) {
		return dst, invalidInput(entrypoint)
	}
	return e.eval(ctx, entrypoint, inputSource{json: input}, dst)
}

// EvalTrusted is Eval for input that is JSON by construction, because the
// caller's own encoder wrote it (a server's input document). JSON input is
// read exactly as by Eval, which no longer costs a separate scan: the two
// differ only for input that is UTF-8 but not JSON, which EvalTrusted
// hands to OPA's Wasm runtime's own lenient parser instead of rejecting
// it: a parse failure makes input undefined (a rule written with `not`
// may then hold), and the parser accepts values JSON cannot express
// (sets). Input that is not UTF-8 is rejected as by Eval. Input that
// comes from outside the process goes through Eval.
func (e *Engine) EvalTrusted(ctx context.Context, entrypoint string, input []byte, dst []byte) ([]byte, error) {
	if !utf8.Valid(input) {
		return dst, invalidInput(entrypoint)
	}
	return e.eval(ctx, entrypoint, inputSource{json: input, lenient: true}, dst)
}

// EvalTrustedUntil is EvalTrusted bounded by a deadline (none if zero)
// as well as by ctx, as if ctx were context.WithDeadline(ctx, deadline),
// the wait for a free policy instance included: an evaluation past it
// fails with an *EvalError of code CodeDeadline. The bound costs no timer:
// the engine's watchdog, which already watches every running evaluation,
// enforces it, stopping the evaluation within about a millisecond of the
// deadline. The context that builtins see ends at the deadline too.
func (e *Engine) EvalTrustedUntil(ctx context.Context, deadline time.Time, entrypoint string, input []byte, dst []byte) ([]byte, error) {
	if !utf8.Valid(input) {
		return dst, invalidInput(entrypoint)
	}
	return e.eval(ctx, entrypoint, inputSource{json: input, lenient: true, deadline: deadline}, dst)
}

// EvalInput is Eval for input written ahead as values (through in's
// Writer) rather than as JSON: no JSON is written or parsed on the way.
// A misuse of the writer fails the evaluation with an *EvalError of code
// CodeInvalidInput before the policy runs. in is only read; it may be
// evaluated again, by one evaluation at a time.
func (e *Engine) EvalInput(ctx context.Context, entrypoint string, in *Input, dst []byte) ([]byte, error) {
	return e.eval(ctx, entrypoint, inputSource{input: in}, dst)
}

// EvalInputUntil is EvalInput bounded by a deadline as EvalTrustedUntil
// is.
func (e *Engine) EvalInputUntil(ctx context.Context, deadline time.Time, entrypoint string, in *Input, dst []byte) ([]byte, error) {
	return e.eval(ctx, entrypoint, inputSource{input: in, deadline: deadline}, dst)
}

func (e *Engine) eval(ctx context.Context, entrypoint string, src inputSource, dst []byte) ([]byte, error) {
	deadline := src.deadline
	for {
		p := e.cur.Load()
		if p == nil {
			if e.closed.Load() {
				return dst, ErrClosed
			}
			return dst, ErrNoBundle
		}
		id, ok := p.entrypoints[entrypoint]
		if !ok {
			return dst, fmt.Errorf("%w: %q", ErrUnknownEntrypoint, entrypoint)
		}
		if err := ctx.Err(); err != nil {
			return dst, classify(ctx, entrypoint, err)
		}
		in, err := p.get(ctx, deadline)
		if err == errRetired {
			continue // a new bundle was loaded meanwhile: use it
		}
		if err != nil {
			if ctx.Err() != nil || err == context.DeadlineExceeded {
				return dst, classify(ctx, entrypoint, err)
			}
			return dst, err
		}
		var out []byte
		if deadline.IsZero() {
			out, err = in.eval(ctx, entrypoint, id, src, dst)
		} else {
			ec := newEvalCtx(ctx, deadline)
			out, err = in.eval(ec, entrypoint, id, src, dst)
			ec.end(stateCanceled) // as a WithTimeout's cancel on return
		}
		if ee, ok := err.(*EvalError); err != nil && err != ErrUndefined && (!ok || ee.Code != CodeInvalidInput) {
			p.discard(in)
			return out, err
		}
		p.put(in)
		return out, err
	}
}

// invalidInput is the error for input that is not UTF-8 JSON. JSON text
// is UTF-8 (RFC 8259); OPA's Wasm runtime reads input with a lenient
// parser of its own, so anything else is rejected before it.
func invalidInput(entrypoint string) error {
	return &EvalError{Code: CodeInvalidInput, Entrypoint: entrypoint, Message: "input is not valid JSON (UTF-8)"}
}
