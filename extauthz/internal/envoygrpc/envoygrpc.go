// Package envoygrpc is the Envoy ext_authz gRPC transport: it hands a
// CheckRequest to the decision core and maps the decision back to a
// CheckResponse.
package envoygrpc

import (
	"context"
	"encoding/json"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// Server implements envoy.service.auth.v3.Authorization over a PDP.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	PDP *pdp.PDP
}

var _ authv3.AuthorizationServer = (*Server)(nil)

var okStatus = &rpcstatus.Status{Code: int32(codes.OK)}

// Check answers one Envoy ext_authz request. It never returns a gRPC
// error for a decision: bad input and evaluation failures are denials
// (fail closed) with the reason in the body and x-nexus-reason, as Envoy
// expects.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	d, err := s.PDP.Envoy(ctx, pdp.IfaceGRPC, req)
	if err != nil {
		return errorResponse(err), nil
	}
	resp := checkResponse(d)
	resp.DynamicMetadata = withDecisionID(d.DynamicMetadata, d.ID)
	return resp, nil
}

// withDecisionID is the policy's dynamic metadata (shared, never modified)
// plus decision_id, as opa-envoy-plugin adds it to every decision.
func withDecisionID(md *structpb.Struct, id string) *structpb.Struct {
	fields := make(map[string]*structpb.Value, len(md.GetFields())+1)
	for k, v := range md.GetFields() {
		fields[k] = v
	}
	fields["decision_id"] = structpb.NewStringValue(id)
	return &structpb.Struct{Fields: fields}
}

// requestParseError is the prefix of the denial of a request that does
// not parse, as opa-envoy-plugin words it.
const requestParseError = "request_parse_error: "

func errorResponse(err error) *authv3.CheckResponse {
	if pdp.IsRequestParse(err) {
		// As opa-envoy-plugin answers it: PERMISSION_DENIED, 400 and the
		// error as a plain-text body.
		msg := requestParseError + err.Error()
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: msg},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest},
				Body:   msg,
			}},
		}
	}
	code, httpStatus, grpcCode := wire.Status(err)
	msg := wire.Describe(err)
	body, _ := json.Marshal(map[string]string{"error": msg, "reason": code})
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(grpcCode), Message: msg},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(httpStatus)},
			Headers: []*corev3.HeaderValueOption{
				header("content-type", "application/json"),
				header("x-nexus-reason", code),
			},
			Body: string(body),
		}},
	}
}

func checkResponse(d pdp.Decision) *authv3.CheckResponse {
	if d.Allowed {
		ok := &authv3.OkHttpResponse{
			Headers:              headers(d.Headers),
			HeadersToRemove:      d.RequestHeadersToRemove,
			ResponseHeadersToAdd: headers(d.ResponseHeadersToAdd),
		}
		return &authv3.CheckResponse{Status: okStatus, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}
	}
	status := d.HTTPStatus
	if status == 0 {
		status = 403
	}
	resp := &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: d.Reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: headers(d.Headers),
			Body:    d.Body,
		}},
	}
	return resp
}

func headers(hs []pdp.Header) []*corev3.HeaderValueOption {
	if len(hs) == 0 {
		return nil
	}
	out := make([]*corev3.HeaderValueOption, len(hs))
	for i, h := range hs {
		out[i] = header(h.Key, h.Value)
	}
	// Repeated keys append; the first occurrence overwrites.
	seen := map[string]bool{}
	for _, o := range out {
		if seen[o.Header.Key] {
			o.AppendAction = corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
		seen[o.Header.Key] = true
	}
	return out
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
