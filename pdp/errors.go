package pdp

import (
	"context"
	"errors"
	"fmt"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp/internal/input"
	"github.com/nexuspdp/nexus/pdp/internal/result"
)

// ErrNotReady is returned before a policy is loaded.
var ErrNotReady = errors.New("pdp: no policy loaded")

// ErrTooLarge reports a request body over Config.MaxBodyBytes.
var ErrTooLarge = errors.New("request body too large")

// ErrBadRequest reports a request that is not a valid check: a missing or
// malformed field. It is the client's error.
var ErrBadRequest = errors.New("bad request")

// ErrUnknownType reports a resource type the schema does not declare.
var ErrUnknownType = errors.New("unknown resource type")

// ErrRevisionUnavailable reports a check whose consistency token names a
// revision the local data did not reach in time. The check fails closed.
var ErrRevisionUnavailable = errors.New("revision unavailable")

// ErrUnavailable reports a write refused because the replicated log
// cannot take it now (unreachable, no quorum, too much contention). Nothing
// was written, and nothing will be: the client may retry.
var ErrUnavailable = errors.New("unavailable")

// ErrBudgetExceeded reports a request whose evaluations used up its time
// budget (Budget): the request is refused whole, and the client may retry
// it, smaller.
var ErrBudgetExceeded = errors.New("the request's evaluation budget is used up")

// ErrOutcomeUnknown reports a write that may or may not have been written:
// the replicated log did not say in time. A retry with the same
// Idempotency-Key gets the first attempt's outcome and is never applied
// twice.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// errStale reports a policy load during a decision: its input was pruned
// for another policy. Callers build the input again.
var errStale = fmt.Errorf("%w: the policy changed during the decision", ErrNotReady)

// Errorf wraps sentinel with a message: errors.Is(err, sentinel) holds.
func Errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// Reason codes for decisions that did not come from the policy. They are
// the "reason" of the decision and the "code" label of the error metric.
const (
	CodeBadRequest    = "bad_request"
	CodeTooLarge      = "too_large"
	CodeNotReady      = "not_ready"
	CodePolicyResult  = "invalid_policy_result"
	CodeUndefined     = "undefined"
	CodeInternal      = "internal"
	CodeUnknownType   = "unknown_resource_type"
	CodeStoreError    = "store_error"
	CodeStoreCorrupt  = "store_corrupt"
	CodeCanceled      = "canceled"
	CodeDeadline      = "deadline_exceeded"
	CodeConflict      = "conflict"
	CodeDepthExceeded = "depth_exceeded"
	CodeBudget        = "budget_exceeded"
	CodeUnknownReason = "other"

	CodeRevisionUnavailable = "revision_unavailable"
	CodeUnavailable         = "unavailable"
	CodeOutcomeUnknown      = "outcome_unknown"
	CodePreconditionFailed  = "precondition_failed"
)

// IsRequestParse reports whether err is a request that could not be turned
// into an input document (a path, query, body or string that does not
// parse): what opa-envoy-plugin calls a request_parse_error.
func IsRequestParse(err error) bool {
	return errors.Is(err, input.ErrInvalidPath) || errors.Is(err, input.ErrInvalidQuery) ||
		errors.Is(err, input.ErrInvalidBody) || errors.Is(err, input.ErrInvalidUTF8)
}

// RequestParseCause is what opa-envoy-plugin says of a request that does
// not parse (IsRequestParse) after "request_parse_error: ": the parser's
// own error. For any other error it is the error's text.
func RequestParseCause(err error) string {
	var re *input.RequestError
	if errors.As(err, &re) {
		return re.Cause.Error()
	}
	return err.Error()
}

// Code maps an error to its stable reason code. This is the one place
// where errors meet codes; transports map codes to statuses.
func Code(err error) string {
	var ee *engine.EvalError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrTooLarge), errors.Is(err, bundle.ErrTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrBudgetExceeded):
		// Before the context's codes: the budget is a deadline.
		return CodeBudget
	case errors.Is(err, ErrRevisionUnavailable):
		// Before the context's codes: a wait cut short by the request's
		// deadline is still a token not reached.
		return CodeRevisionUnavailable
	case errors.Is(err, ErrOutcomeUnknown):
		return CodeOutcomeUnknown
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, ErrBadRequest), errors.Is(err, input.ErrInvalidUTF8),
		errors.Is(err, input.ErrInvalidPath), errors.Is(err, input.ErrInvalidQuery), errors.Is(err, input.ErrInvalidBody),
		errors.Is(err, engine.ErrInvalidInput):
		return CodeBadRequest
	case errors.Is(err, ErrUnknownType):
		return CodeUnknownType
	case errors.Is(err, ErrNotReady), errors.Is(err, engine.ErrNoBundle):
		return CodeNotReady
	case errors.Is(err, engine.ErrUndefined):
		return CodeUndefined
	case errors.Is(err, result.ErrInvalid):
		return CodePolicyResult
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadline
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	case errors.Is(err, datastore.ErrCorrupt):
		// Before the engine's codes: a policy builtin that met a damaged
		// data file is the store's failure, not the policy's.
		return CodeStoreCorrupt
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, datastore.ErrNoSchema):
		return CodeStoreError
	case errors.Is(err, api.ErrSyntax), errors.Is(err, datastore.ErrInvalidTuple),
		errors.Is(err, datastore.ErrInvalidSchema), errors.Is(err, datastore.ErrUnknown),
		errors.Is(err, bundle.ErrInvalid), errors.Is(err, ErrNoEntrypoint), errors.Is(err, ErrBadPolicyData):
		return CodeBadRequest
	case errors.Is(err, datastore.ErrPreconditionFailed):
		return CodePreconditionFailed
	case errors.Is(err, datastore.ErrSchemaOrphans):
		return CodeConflict
	case errors.Is(err, datastore.ErrDepthExceeded):
		return CodeDepthExceeded
	}
	return CodeInternal
}
