package engine

import (
	"errors"
	"fmt"
)

// ErrUndefined is returned by Eval when the entrypoint's result is undefined.
var ErrUndefined = errors.New("engine: result is undefined")

// ErrNoBundle is returned by Eval before the first successful Load.
var ErrNoBundle = errors.New("engine: no bundle loaded")

// ErrClosed is returned by Eval and Load after Close.
var ErrClosed = errors.New("engine: closed")

// ErrUnknownEntrypoint is returned (wrapped) by Eval for an entrypoint the
// loaded bundle does not have.
var ErrUnknownEntrypoint = errors.New("engine: unknown entrypoint")

// ErrInvalidInput is matched (errors.Is) by the *EvalError Eval returns for
// input that is not valid JSON.
var ErrInvalidInput = errors.New("engine: input is not valid JSON")

// ErrInvalidBundle is returned (wrapped) by Load for a bundle whose module
// cannot be run.
var ErrInvalidBundle = errors.New("engine: invalid bundle")

// ErrBuiltinExists is returned by Registry.Register for a name registered
// twice.
var ErrBuiltinExists = errors.New("engine: builtin already registered")

// Stable codes of EvalError.
const (
	// CodeInvalidInput: the input is not valid JSON.
	CodeInvalidInput = "invalid_input"
	// CodeDeadline: the context's deadline passed during evaluation.
	CodeDeadline = "deadline_exceeded"
	// CodeCanceled: the context was canceled during evaluation.
	CodeCanceled = "canceled"
	// CodeMemory: the instance hit its memory limit.
	CodeMemory = "memory_limit"
	// CodeAbort: the policy aborted (opa_abort), e.g. a conflict between
	// complete rule values or a function with multiple outputs.
	CodeAbort = "abort"
	// CodeBuiltin: a host builtin failed with an error that halts evaluation.
	CodeBuiltin = "builtin_error"
	// CodeInvalidResult: the module produced a result that is not valid
	// JSON (OPA's Wasm runtime can, e.g. to_number(".")); it is not passed
	// on.
	CodeInvalidResult = "invalid_result"
	// CodeTrap: the module trapped (a bug in the module or runtime).
	CodeTrap = "trap"
)

// EvalError is the error of an evaluation that did not run to completion.
type EvalError struct {
	// Code is one of the Code* constants; stable, suitable as a metric label.
	Code string
	// Entrypoint is the entrypoint evaluated.
	Entrypoint string
	// Message describes what happened.
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *EvalError) Error() string {
	if e.Message == "" && e.Err != nil {
		return fmt.Sprintf("engine: eval %s: %s: %v", e.Entrypoint, e.Code, e.Err)
	}
	return fmt.Sprintf("engine: eval %s: %s: %s", e.Entrypoint, e.Code, e.Message)
}

// Unwrap returns the underlying error.
func (e *EvalError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidInput for invalid input errors.
func (e *EvalError) Is(target error) bool {
	return target == ErrInvalidInput && e.Code == CodeInvalidInput
}
