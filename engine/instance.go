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

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one module instance; never used by two goroutines at once.
type instance struct {
	p    *policy
	slot int // the pool slot it belongs to
	mod  api.Module
	mem  api.Memory

	fEval, fMalloc, fJSONParse, fJSONDump, fValueDump, fValueParse api.Function

	// interrupt is the module's interrupt flag; the watchdog sets it when
	// the context of the evaluation in progress (wctx) is done.
	interrupt api.MutableGlobal
	wmu       sync.Mutex
	wctx      context.Context
	fired     bool

	stack [8]uint64 // opa_eval parameters and result
	inner [4]uint64 // nested calls from host functions

	// per-evaluation builtin state
	bstate *builtinState
	strs   []string
	buf    []byte
}

var (
	resultPrefix = []byte(`[{"result":`)
	resultSuffix = []byte(`}]`)
)

// eval runs the entrypoint and appends its result JSON to dst.
func (in *instance) eval(ctx context.Context, entrypoint string, id int32, input, dst []byte) ([]byte, error) {
	p := in.p
	inputAddr := p.evalHeapPtr
	end := uint64(inputAddr) + uint64(len(input))
	if size := uint64(in.mem.Size()); end > size {
		need := (end - size + pageSize - 1) / pageSize
		if _, ok := in.mem.Grow(uint32(need)); !ok {
			return dst, &EvalError{Code: CodeMemory, Entrypoint: entrypoint, Message: fmt.Sprintf("input of %d bytes exceeds the memory limit", len(input))}
		}
	}
	if len(input) > 0 && !in.mem.Write(inputAddr, input) {
		return dst, &EvalError{Code: CodeMemory, Entrypoint: entrypoint, Message: "input does not fit in memory"}
	}
	var inputPtr uint64
	if len(input) > 0 {
		inputPtr = uint64(inputAddr)
	}
	s := in.stack[:7]
	s[0] = 0 // reserved
	s[1] = uint64(uint32(id))
	s[2] = uint64(p.dataAddr)
	s[3] = inputPtr
	s[4] = uint64(len(input))
	s[5] = end // heap starts after the input
	s[6] = 0   // JSON output
	watched := ctx.Done() != nil
	if watched {
		in.wmu.Lock()
		in.wctx = ctx
		in.wmu.Unlock()
		p.wd.started()
	}
	err := in.fEval.CallWithStack(ctx, s)
	if watched {
		in.wmu.Lock()
		in.wctx = nil
		fired := in.fired
		in.fired = false
		in.wmu.Unlock()
		if fired {
			in.interrupt.Set(0)
			if err != nil {
				err = &interruptError{ctx.Err()}
			}
		}
	}
	if in.bstate != nil {
		in.bstate.done()
	}
	if err != nil {
		return dst, classify(ctx, entrypoint, err)
	}
	res := uint32(s[0])
	size := in.mem.Size()
	if res == 0 || res >= size {
		return dst, &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Err: errNoResult}
	}
	b, ok := in.cstring(res)
	if !ok {
		return dst, &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Message: "unterminated result"}
	}
	if len(b) == 2 && b[0] == '[' && b[1] == ']' {
		return dst, ErrUndefined
	}
	if !bytes.HasPrefix(b, resultPrefix) || !bytes.HasSuffix(b, resultSuffix) || len(b) < len(resultPrefix)+len(resultSuffix) {
		return dst, &EvalError{Code: CodeTrap, Entrypoint: entrypoint, Message: "unexpected result shape"}
	}
	val := b[len(resultPrefix) : len(b)-len(resultSuffix)]
	if !validResult(val) {
		return dst, &EvalError{Code: CodeInvalidResult, Entrypoint: entrypoint, Message: "policy result is not valid JSON"}
	}
	return append(dst, val...), nil
}

// validResult checks the result JSON; the common results skip the scan.
func validResult(b []byte) bool {
	switch string(b) {
	case "true", "false", "null", "{}", "[]":
		return true
	}
	return json.Valid(b)
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

// watch is called by the watchdog: it raises the interrupt flag if the
// evaluation in progress has a done context, and reports whether a watched
// evaluation is in progress.
func (in *instance) watch() bool {
	in.wmu.Lock()
	defer in.wmu.Unlock()
	if in.wctx != nil && !in.fired && in.wctx.Err() != nil {
		in.interrupt.Set(1)
		in.fired = true
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
