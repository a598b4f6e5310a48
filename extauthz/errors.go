package extauthz

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/input"
	"github.com/nexuspdp/nexus/extauthz/internal/result"
)

// ErrNotReady is returned before a policy is loaded.
var ErrNotReady = errors.New("extauthz: no policy loaded")

// ErrTooLarge reports a request body over Config.MaxBodyBytes.
var ErrTooLarge = errors.New("request body too large")

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
	CodeCanceled      = "canceled"
	CodeDeadline      = "deadline_exceeded"
	CodeUnknownReason = "other"
)

// classify maps an error to its stable code and to the HTTP and gRPC
// statuses it answers with. This is the one place where errors meet
// status codes.
func classify(err error) (code string, httpStatus int, grpcCode codes.Code) {
	var ee *engine.EvalError
	switch {
	case errors.Is(err, ErrTooLarge):
		return CodeTooLarge, http.StatusRequestEntityTooLarge, codes.InvalidArgument
	case errors.Is(err, checkapi.ErrBadRequest), errors.Is(err, input.ErrInvalidUTF8),
		errors.Is(err, input.ErrInvalidPath), errors.Is(err, input.ErrInvalidBody),
		errors.Is(err, engine.ErrInvalidInput):
		return CodeBadRequest, http.StatusBadRequest, codes.InvalidArgument
	case errors.Is(err, errUnknownType):
		return CodeUnknownType, http.StatusBadRequest, codes.InvalidArgument
	case errors.Is(err, ErrNotReady), errors.Is(err, engine.ErrNoBundle):
		return CodeNotReady, http.StatusServiceUnavailable, codes.Unavailable
	case errors.Is(err, engine.ErrUndefined):
		return CodeUndefined, http.StatusInternalServerError, codes.Internal
	case errors.Is(err, result.ErrInvalid):
		return CodePolicyResult, http.StatusInternalServerError, codes.Internal
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadline, http.StatusGatewayTimeout, codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return CodeCanceled, 499, codes.Canceled
	case errors.As(err, &ee):
		return ee.Code, http.StatusInternalServerError, codes.Internal
	case errors.Is(err, datastore.ErrNoSchema):
		return CodeStoreError, http.StatusServiceUnavailable, codes.Unavailable
	case errors.Is(err, api.ErrSyntax), errors.Is(err, datastore.ErrInvalidTuple),
		errors.Is(err, datastore.ErrInvalidSchema), errors.Is(err, datastore.ErrUnknown),
		errors.Is(err, bundle.ErrInvalid):
		return CodeBadRequest, http.StatusBadRequest, codes.InvalidArgument
	case errors.Is(err, datastore.ErrPreconditionFailed), errors.Is(err, datastore.ErrSchemaOrphans):
		return "conflict", http.StatusConflict, codes.FailedPrecondition
	case errors.Is(err, datastore.ErrDepthExceeded):
		return "depth_exceeded", http.StatusInternalServerError, codes.Internal
	}
	return CodeInternal, http.StatusInternalServerError, codes.Internal
}
