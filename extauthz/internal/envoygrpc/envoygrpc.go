// Package envoygrpc is the Envoy ext_authz gRPC transport: it hands a
// CheckRequest to the decision core and maps the decision back to the
// CheckResponse opa-envoy-plugin answers with.
//
// A decision is answered as the plugin answers it:
//
//   - a boolean result: the status alone (OK or PERMISSION_DENIED), no HTTP
//     response;
//   - an object result, allowed: OK and an OkHttpResponse with headers,
//     headers_to_remove, response_headers_to_add, query_parameters_to_set
//     and query_parameters_to_remove;
//   - an object result, denied: PERMISSION_DENIED and a DeniedHttpResponse
//     with the status (403 unless http_status says), headers and body;
//   - the object's dynamic_metadata, and decision_id in the dynamic
//     metadata of every decision;
//   - each header as a HeaderValueOption with its key and value alone
//     (neither append nor append_action), one per value of an array.
//
// A request that cannot be turned into an input document (a path, query
// or body that does not parse) is PERMISSION_DENIED with a 400 response
// whose body is "request_parse_error: " and the cause, and no decision_id.
// Any other failure (an undefined decision, an evaluation error, a result
// that is not a decision, no policy loaded) is a gRPC error, as the plugin
// returns: UNKNOWN, or CANCELLED or DEADLINE_EXCEEDED when the request's
// context ended. Envoy answers a gRPC error by its own failure_mode_allow
// and status_on_error; nexus' shipped configurations keep it closed
// (failure_mode_allow: false).
//
// A request with an x-nexus-revision header (a consistency token) is
// decided once the data has reached that revision. A malformed token is
// PERMISSION_DENIED with a 400 response, a revision not reached in time
// PERMISSION_DENIED with a 503 response (reason revision_unavailable): both
// deny even where Envoy would allow on a gRPC error.
package envoygrpc

import (
	"context"
	"errors"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// Server implements envoy.service.auth.v3.Authorization over a PDP.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	PDP *pdp.PDP
	// Metrics, if not nil, are opa-envoy-plugin's performance metrics.
	Metrics *Metrics
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// Check answers one Envoy ext_authz request as opa-envoy-plugin does. In
// dry-run (pdp.PDP.DryRun) a decision that denies is answered as an
// allow with an empty OkHttpResponse, as the plugin does; the decision
// log keeps the denial. Requests that do not parse and failed evaluations
// answer as without dry-run.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	var start time.Duration
	if s.Metrics != nil {
		start = time.Since(epoch)
	}
	if tok, ok := req.GetAttributes().GetRequest().GetHttp().GetHeaders()[pdp.RevisionHeader]; ok {
		if resp := s.atRevision(ctx, tok); resp != nil {
			return resp, nil
		}
	}
	// The server's codec (NewCodec) decoded req from the wire: its
	// strings are UTF-8.
	d, err := s.PDP.EnvoyDecoded(ctx, pdp.IfaceGRPC, req)
	if err != nil {
		s.Metrics.countError(err)
		if pdp.IsRequestParse(err) {
			return requestParseResponse(err), nil
		}
		return nil, grpcError(err)
	}
	resp := checkResponse(d)
	if s.Metrics != nil {
		s.Metrics.observe(time.Since(epoch) - start)
	}
	if s.PDP.DryRun() && resp.GetStatus().GetCode() != int32(codes.OK) {
		resp.Status = okStatus
		resp.HttpResponse = &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}}
	}
	return resp, nil
}

// epoch is a reading of the clock taken once: a check's duration is the
// difference of two time.Since(epoch), which read the monotonic clock
// alone, where a time.Now would read the wall clock as well. Without
// Metrics, a check reads neither.
var epoch = time.Now()

// atRevision waits until the data reaches the request's consistency token
// (the x-nexus-revision header). It returns nil to go on, or the denial:
// 400 for a malformed token, 503 for a revision not reached in time. Both
// are answers, not gRPC errors, so that Envoy denies the request whatever
// its failure_mode_allow says: a check that asked for fresh data must
// never be allowed on stale data.
func (s *Server) atRevision(ctx context.Context, tok string) *authv3.CheckResponse {
	rev, err := pdp.ParseRevision(tok)
	if err != nil {
		s.PDP.CountError(pdp.IfaceGRPC, err)
	} else {
		err = s.PDP.WaitRevision(ctx, pdp.IfaceGRPC, rev)
	}
	if err == nil {
		return nil
	}
	code, httpStatus, _ := wire.Status(err)
	msg := code + ": " + wire.Describe(err)
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: msg},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(httpStatus)},
			Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-nexus-reason", Value: code}}},
			Body:    msg,
		}},
	}
}

// answer holds the messages of one decision's CheckResponse, allocated
// together: a check allocates them all at once rather than one by one.
// An answer with an HTTP response is an allowAnswer or a denyAnswer,
// which hold its messages too: a boolean decision's answer is less than
// half their size.
type answer struct {
	resp authv3.CheckResponse
	md   structpb.Struct
	id   structpb.Value
	idOf structpb.Value_StringValue
}

type allowAnswer struct {
	answer
	ok   authv3.OkHttpResponse
	okOf authv3.CheckResponse_OkResponse
}

type denyAnswer struct {
	answer
	denied  authv3.DeniedHttpResponse
	deniedO authv3.CheckResponse_DeniedResponse
	status  typev3.HttpStatus
}

// setDecisionID sets a's dynamic metadata to the policy's (md, shared,
// never modified) plus decision_id, as opa-envoy-plugin adds it to every
// decision.
func (a *answer) setDecisionID(md *structpb.Struct, id string) {
	fields := make(map[string]*structpb.Value, len(md.GetFields())+1)
	for k, v := range md.GetFields() {
		fields[k] = v
	}
	a.idOf.StringValue = id
	a.id.Kind = &a.idOf
	fields["decision_id"] = &a.id
	a.md.Fields = fields
	a.resp.DynamicMetadata = &a.md
}

// requestParseError is the prefix of the denial of a request that does
// not parse, as opa-envoy-plugin words it.
const requestParseError = "request_parse_error: "

// requestParseResponse is opa-envoy-plugin's answer to a request it cannot
// turn into an input: PERMISSION_DENIED, 400 and the parser's error as a
// plain-text body, no dynamic metadata.
func requestParseResponse(err error) *authv3.CheckResponse {
	msg := requestParseError + pdp.RequestParseCause(err)
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: msg},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest},
			Body:   msg,
		}},
	}
}

// grpcError is the gRPC error a failed decision returns. The code is the
// plugin's (grpc-go's for a plain error): DEADLINE_EXCEEDED or CANCELLED
// when the request's context ended, RESOURCE_EXHAUSTED for a body over
// the limit (as for a message over the gRPC size limit), UNKNOWN
// otherwise. The message is the client's view of the error (wire.Describe):
// the detail of a server-side failure stays in nexus' log. An undefined
// decision is worded as the plugin words it.
func grpcError(err error) error {
	code := codes.Unknown
	switch {
	case pdp.Code(err) == pdp.CodeUndefined:
		return status.Error(codes.Unknown, "undefined decision")
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, pdp.ErrTooLarge):
		code = codes.ResourceExhausted
	case pdp.Code(err) == pdp.CodeStoreCorrupt:
		// nexus' own store failed (the plugin has none): UNAVAILABLE, as
		// its /readyz says.
		code = codes.Unavailable
	}
	return status.Error(code, wire.Describe(err))
}

var (
	okStatus     = &rpcstatus.Status{Code: int32(codes.OK)}
	deniedStatus = &rpcstatus.Status{Code: int32(codes.PermissionDenied)}
)

// checkResponse is the answer to decision d, its dynamic metadata
// included.
func checkResponse(d pdp.Decision) *authv3.CheckResponse {
	var a *answer
	switch {
	case !d.Object:
		a = &answer{}
		a.resp.Status = deniedStatus
		if d.Allowed {
			a.resp.Status = okStatus
		}
	case d.Allowed:
		aa := &allowAnswer{}
		aa.ok = authv3.OkHttpResponse{
			Headers:                 headers(d.Headers),
			HeadersToRemove:         d.RequestHeadersToRemove,
			ResponseHeadersToAdd:    headers(d.ResponseHeadersToAdd),
			QueryParametersToRemove: d.QueryParametersToRemove,
			QueryParametersToSet:    queryParameters(d.QueryParametersToSet),
		}
		aa.okOf.OkResponse = &aa.ok
		a = &aa.answer
		a.resp.Status, a.resp.HttpResponse = okStatus, &aa.okOf
	default:
		da := &denyAnswer{}
		da.status.Code = typev3.StatusCode(d.HTTPStatus)
		da.denied = authv3.DeniedHttpResponse{Status: &da.status, Headers: headers(d.Headers), Body: d.Body}
		da.deniedO.DeniedResponse = &da.denied
		a = &da.answer
		a.resp.Status, a.resp.HttpResponse = deniedStatus, &da.deniedO
	}
	a.setDecisionID(d.DynamicMetadata, d.ID)
	return &a.resp
}

// header is one header of a response, its two messages allocated
// together.
type header struct {
	opt corev3.HeaderValueOption
	val corev3.HeaderValue
}

// headers are HeaderValueOptions as the plugin writes them: the header
// alone, Envoy's default for each (an ext_authz response's header
// overwrites the request's, or is added).
func headers(hs []pdp.Header) []*corev3.HeaderValueOption {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*corev3.HeaderValueOption, len(hs))
	all := make([]header, len(hs))
	for i, h := range hs {
		a := &all[i]
		a.val.Key, a.val.Value = h.Key, h.Value
		a.opt.Header = &a.val
		out[i] = &a.opt
	}
	return out
}

func queryParameters(qs []pdp.QueryParameter) []*corev3.QueryParameter {
	if len(qs) == 0 {
		return nil
	}
	out := make([]*corev3.QueryParameter, len(qs))
	for i, q := range qs {
		out[i] = &corev3.QueryParameter{Key: q.Key, Value: q.Value}
	}
	return out
}
