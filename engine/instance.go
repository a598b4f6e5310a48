package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one module instance; never used by two goroutines at once.
type instance struct {
	p    *policy
	slot int // the pool slot it belongs to
	mod  api.Module
	mem  api.Memory

	fEvalCtx, fHeapSet, fMalloc, fJSONParse, fJSONDump, fValueDump, fValueParse api.Function

	// interrupt is the module's loop budget (wasmbin): the loops count it
	// down and, when it is spent, ask the host (hostYield) whether to
	// stop. The watchdog spends it when the context of the evaluation in
	// progress (wctx) is done, and sets fired, the answer.
	interrupt api.MutableGlobal
	wmu       sync.Mutex
	wctx      context.Context
	fired     bool
	tdCancel  topdown.Cancel // of OPA builtins in the evaluation, if any ran
	// budget is the loop budget hostYield gives back, adapted so that
	// about yieldInterval passes between yields, kept from one evaluation
	// to the next; yieldAt is the time of the evaluation's last yield
	// (since yieldEpoch), 0 before its first.
	budget  int32
	yieldAt time.Duration

	// hctx is the context an evaluation runs the module under: the
	// evaluation's, which it holds only while the module runs, with the
	// instance, which every host call finds in it (instanceOf).
	hctx hostCtx

	stack [8]uint64 // eval parameters and result
	inner [4]uint64 // nested calls from host functions

	// per-evaluation builtin state
	bstate *builtinState
	strs   []string
	buf    []byte
	args   argCache   // terms of OPA builtins' arguments
	memo   resultMemo // results of pure OPA builtins
	images imageMemo  // heap images of builtin results written again

	arena  arena       // input written into the heap
	barena arena       // builtin results
	vw     ValueWriter // writes into arena or barena
}

// inputSource is where an evaluation's input comes from: JSON text
// (none when empty) or values written ahead (an Input).
type inputSource struct {
	json []byte
	// lenient: JSON text that does not parse is handed to the runtime's
	// own parser (EvalTrusted), instead of being rejected.
	lenient bool
	input   *Input
	// runtimeParse hands JSON text (or OPA's value syntax) to the
	// runtime's own parser, as every evaluation did before: the
	// reference the tests compare the Go writer with.
	runtimeParse bool
	// deadline, if not zero, bounds the evaluation (EvalTrustedUntil).
	deadline time.Time
}

// eval runs the entrypoint and appends its result JSON to dst. The input
// is written into the heap as the runtime's values (no JSON parsing in
// the module), after an eval context whose input, data and entrypoint
// are set; the module's eval export then runs the policy.
func (in *instance) eval(ctx context.Context, entrypoint string, id int32, src inputSource, dst []byte) ([]byte, error) {
	p := in.p
	var (
		a    *arena
		ctxp uint32
		w    *ValueWriter
	)
	if v := src.input; v != nil {
		if len(v.a.b) == 0 {
			v.Writer() // the zero Input: no input
		}
		a, ctxp, w = &v.a, v.ctxp, &v.w
	} else {
		a = &in.arena
		a.reset()
		ctxp = a.alloc(sizeCtx)
		w = &in.vw
		w.reset(a)
	}
	switch {
	case src.input != nil:
	case src.runtimeParse && len(src.json) > 0:
		w.fail(errSyntax)
	case len(src.json) > 0:
		jp := jsonParser{w: w, b: src.json}
		if err := jp.document(); err != nil {
			w.fail(err)
		}
	}
	root, has, werr := w.result()
	var text uint32 // input text for the runtime's parser
	if werr != nil {
		if src.input != nil {
			return dst, &EvalError{Code: CodeInvalidInput, Entrypoint: entrypoint, Message: "invalid input: " + werr.Error()}
		}
		if !src.lenient && !src.runtimeParse {
			return dst, invalidInput(entrypoint)
		}
		a.reset()
		ctxp = a.alloc(sizeCtx)
		text = a.alloc(uint32(len(src.json)))
		copy(a.b[text:], src.json)
		has = false
	}
	if has {
		a.ptr(ctxp, a.base+root.addr) // an Input evaluated before is relocated
	}
	a.u32(ctxp+4, p.dataAddr) // an address in the snapshot: not relocated
	a.u32(ctxp+12, uint32(id))
	base := p.evalHeapPtr
	a.relocate(base)
	end := uint64(base) + uint64(len(a.b))
	if size := uint64(in.mem.Size()); end > size {
		need := (end - size + pageSize - 1) / pageSize
		if _, ok := in.mem.Grow(uint32(need)); !ok {
			return dst, &EvalError{Code: CodeMemory, Entrypoint: entrypoint, Message: fmt.Sprintf("input of %d bytes exceeds the memory limit", len(a.b))}
		}
	}
	if !in.mem.Write(base, a.b) {
		return dst, &EvalError{Code: CodeMemory, Entrypoint: entrypoint, Message: "input does not fit in memory"}
	}
	ctxAddr := base + ctxp
	s := in.stack[:1]
	s[0] = end
	err := in.fHeapSet.CallWithStack(ctx, s)
	if err == nil && text != 0 {
		var v uint32
		v, err = in.call1(ctx, in.fValueParse, uint64(base+text), uint64(len(src.json)))
		if err == nil {
			in.mem.WriteUint32Le(ctxAddr, v)
		}
	}
	if err == nil {
		s[0] = uint64(ctxAddr)
		err = in.run(ctx, in.fEvalCtx, s)
		if err == nil && uint32(s[0]) != 0 {
			err = &abortPanic{msg: "eval failed"}
		}
	}
	if in.bstate != nil {
		// An OPA builtin that saw the context end answered as a failure
		// (http.send's status 0) and the policy may have decided on it
		// before the watchdog came by: that decision is not the policy's
		// answer to the request.
		if err == nil && in.bstate.watched && ctx.Err() != nil {
			err = &interruptError{ctx.Err()}
		}
		in.bstate.done(in)
	}
	if err != nil {
		return dst, classify(ctx, entrypoint, err)
	}
	res, ok := in.mem.ReadUint32Le(ctxAddr + 8)
	size := in.mem.Size()
	if !ok || res == 0 || res >= size {
		return dst, &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Err: errNoResult}
	}
	m, _ := in.mem.Read(0, size)
	return dumpResult(m, res, entrypoint, dst)
}

// dumpResult appends the JSON of the value in the result set at res.
// appendJSON writes only valid JSON, or stops: the result is not scanned
// again.
func dumpResult(m []byte, res uint32, entrypoint string, dst []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == errDumpNumber {
				out, err = dst, &EvalError{Code: CodeInvalidResult, Entrypoint: entrypoint, Message: "policy result is not valid JSON"}
				return
			}
			out, err = dst, &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Message: "unreadable result"}
		}
	}()
	v, n, ok := resultValue(m, res)
	switch {
	case ok && n == 0:
		return dst, ErrUndefined
	case ok && n > 1:
		return dst, &EvalError{Code: CodeInvalidResult, Entrypoint: entrypoint, Message: "policy result is not valid JSON"}
	case !ok:
		return dst, &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Message: "unexpected result shape"}
	}
	return appendJSON(dst, m, v, 0), nil
}

// watchable reports whether ctx can be done, so that the watchdog
// watches an evaluation under it, without making an evalCtx's Done
// channel, which is made only on demand.
func watchable(ctx context.Context) bool {
	_, bounded := ctx.(*evalCtx)
	return bounded || ctx.Done() != nil
}

// hostCtx is an evaluation's context with the instance it runs on.
// Between evaluations it holds endedCtx: a builtin that kept it sees its
// evaluation over.
type hostCtx struct {
	context.Context
	in *instance
}

var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// run calls f with the watchdog watching ctx (when it can be done).
func (in *instance) run(ctx context.Context, f api.Function, s []uint64) error {
	in.yieldAt = 0
	watched := watchable(ctx)
	if watched {
		in.wmu.Lock()
		in.wctx = ctx
		in.wmu.Unlock()
		in.p.wd.started()
	}
	in.hctx.Context = ctx
	err := f.CallWithStack(&in.hctx, s)
	in.hctx.Context = endedCtx
	if watched {
		in.wmu.Lock()
		in.wctx = nil
		fired := in.fired
		in.fired = false
		in.wmu.Unlock()
		if fired {
			in.interrupt.Set(uint64(in.budget))
			if err != nil {
				err = &interruptError{ctx.Err()}
			}
		}
	}
	return err
}

// abortPanic is raised by opa_abort.
type abortPanic struct{ msg string }

func (a *abortPanic) Error() string { return "policy aborted: " + a.msg }

// builtinPanic is raised when a host builtin halts evaluation.
type builtinPanic struct {
	name string
	err  error
}

func (b *builtinPanic) Error() string { return fmt.Sprintf("builtin %s: %v", b.name, b.err) }
func (b *builtinPanic) Unwrap() error { return b.err }

// interruptError is an evaluation the watchdog stopped.
type interruptError struct{ err error }

func (e *interruptError) Error() string { return "interrupted: " + e.err.Error() }
func (e *interruptError) Unwrap() error { return e.err }

// watch is called by the watchdog at time now: it spends the loop budget
// and sets fired if the evaluation in progress has a done context (one of
// EvalTrustedUntil is ended here when its deadline is before now), and
// reports whether a watched evaluation is in progress.
func (in *instance) watch(now time.Time) bool {
	in.wmu.Lock()
	defer in.wmu.Unlock()
	if ec, ok := in.wctx.(*evalCtx); ok && !in.fired {
		ec.expire(now)
	}
	if in.wctx != nil && !in.fired && in.wctx.Err() != nil {
		in.interrupt.Set(0) // the next loop iteration asks hostYield
		in.fired = true
		if in.tdCancel != nil {
			in.tdCancel.Cancel()
		}
	}
	return in.wctx != nil
}

func classify(ctx context.Context, entrypoint string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &EvalError{Code: CodeDeadline, Entrypoint: entrypoint, Message: "evaluation stopped at the deadline", Err: context.DeadlineExceeded}
	}
	if errors.Is(err, context.Canceled) {
		return &EvalError{Code: CodeCanceled, Entrypoint: entrypoint, Message: "evaluation canceled", Err: context.Canceled}
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return &EvalError{Code: CodeDeadline, Entrypoint: entrypoint, Message: "evaluation stopped at the deadline", Err: context.DeadlineExceeded}
		case sys.ExitCodeContextCanceled:
			return &EvalError{Code: CodeCanceled, Entrypoint: entrypoint, Message: "evaluation canceled", Err: context.Canceled}
		}
	}
	var ab *abortPanic
	if errors.As(err, &ab) {
		if strings.Contains(ab.msg, "out of memory") || strings.Contains(ab.msg, "malloc") {
			return &EvalError{Code: CodeMemory, Entrypoint: entrypoint, Message: ab.msg}
		}
		return &EvalError{Code: CodeAbort, Entrypoint: entrypoint, Message: ab.msg}
	}
	var bp *builtinPanic
	if errors.As(err, &bp) {
		if ce := ctx.Err(); ce != nil && errors.Is(bp.err, ce) {
			code := CodeCanceled
			if errors.Is(ce, context.DeadlineExceeded) {
				code = CodeDeadline
			}
			return &EvalError{Code: code, Entrypoint: entrypoint, Message: bp.Error(), Err: ce}
		}
		return &EvalError{Code: CodeBuiltin, Entrypoint: entrypoint, Message: bp.Error(), Err: bp.err}
	}
	if ce := ctx.Err(); ce != nil {
		code := CodeCanceled
		if errors.Is(ce, context.DeadlineExceeded) {
			code = CodeDeadline
		}
		return &EvalError{Code: code, Entrypoint: entrypoint, Err: ce}
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i > 0 {
		msg = msg[:i] // drop wazero's stack trace
	}
	return &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Message: msg}
}

// call1 calls f with args and returns its single i32 result.
func (in *instance) call1(ctx context.Context, f api.Function, args ...uint64) (uint32, error) {
	s := in.inner[:max(len(args), 1)]
	copy(s, args)
	if err := f.CallWithStack(ctx, s); err != nil {
		return 0, err
	}
	return uint32(s[0]), nil
}

func (in *instance) malloc(ctx context.Context, n uint32) (uint32, error) {
	a, err := in.call1(ctx, in.fMalloc, uint64(n))
	if err != nil {
		return 0, err
	}
	if a == 0 {
		return 0, &abortPanic{msg: "opa_malloc: out of memory"}
	}
	return a, nil
}

// cstring reads the NUL-terminated string at addr (a view of memory).
func (in *instance) cstring(addr uint32) ([]byte, bool) {
	size := in.mem.Size()
	if addr >= size {
		return nil, false
	}
	b, ok := in.mem.Read(addr, size-addr)
	if !ok {
		return nil, false
	}
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return nil, false
	}
	return b[:n], true
}

// callJSON calls an exported function that returns a value, dumps it as
// JSON and decodes it into v.
func (in *instance) callJSON(ctx context.Context, name string, v any) error {
	addr, err := in.call1(ctx, in.mod.ExportedFunction(name))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidBundle, name, err)
	}
	s, err := in.call1(ctx, in.fJSONDump, uint64(addr))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidBundle, name, err)
	}
	b, ok := in.cstring(s)
	if !ok {
		return fmt.Errorf("%w: %s: bad dump", ErrInvalidBundle, name)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidBundle, name, err)
	}
	return nil
}

// str reads the OPA string value at addr without copying. The string is
// valid until the instance's memory changes.
func (in *instance) str(addr uint32) (string, bool) {
	h, ok := in.mem.Read(addr, 12)
	if !ok || (h[0] != 4 && h[0] != 8) { // OPA_STRING, OPA_STRING_INTERNED
		return "", false
	}
	n := binary.LittleEndian.Uint32(h[4:])
	if n == 0 {
		return "", true
	}
	ptr := binary.LittleEndian.Uint32(h[8:])
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return "", false
	}
	return unsafeString(b), true
}
