package extauthz

import (
	"context"
	"encoding/json"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/extauthz/internal/input"
	"github.com/nexuspdp/nexus/extauthz/internal/prune"
	"github.com/nexuspdp/nexus/extauthz/internal/result"
)

// authServer implements envoy.service.auth.v3.Authorization.
type authServer struct {
	authv3.UnimplementedAuthorizationServer
	p *pdp
}

var _ authv3.AuthorizationServer = (*authServer)(nil)

var okStatus = &rpcstatus.Status{Code: int32(codes.OK)}

// Check answers one Envoy ext_authz request. It never returns a gRPC
// error for a decision: bad input and evaluation failures are denials
// (fail closed) with the reason in the body and x-nexus-reason, as Envoy
// expects; only a canceled request returns an error.
func (s *authServer) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	h := req.GetAttributes().GetRequest().GetHttp()
	md := meta{action: h.GetMethod(), resource: h.GetPath()}
	d, err := s.p.decideBuilt(ctx, ifaceGRPC, s.p.cfg.EnvoyEntrypoint, md, func(dst []byte, keep *prune.Tree) ([]byte, error) {
		if int64(len(h.GetBody())+len(h.GetRawBody())) > s.p.cfg.MaxBodyBytes {
			return dst, ErrTooLarge
		}
		return input.AppendEnvoy(dst, req, input.Options{Keep: keep})
	})
	if err != nil {
		return errorResponse(err), nil
	}
	return checkResponse(d.Decision), nil
}

func errorResponse(err error) *authv3.CheckResponse {
	code, httpStatus, grpcCode := classify(err)
	body, _ := json.Marshal(map[string]string{"error": err.Error(), "reason": code})
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(grpcCode), Message: err.Error()},
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

func checkResponse(d result.Decision) *authv3.CheckResponse {
	if d.Allowed {
		ok := &authv3.OkHttpResponse{
			Headers:              headers(d.Headers),
			HeadersToRemove:      d.RequestHeadersToRemove,
			ResponseHeadersToAdd: headers(d.ResponseHeadersToAdd),
		}
		resp := &authv3.CheckResponse{Status: okStatus, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}
		resp.DynamicMetadata = dynamicMetadata(d.DynamicMetadata)
		return resp
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
	resp.DynamicMetadata = dynamicMetadata(d.DynamicMetadata)
	return resp
}

func dynamicMetadata(js json.RawMessage) *structpb.Struct {
	if len(js) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		return nil
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		return nil
	}
	return s
}

func headers(hs []result.Header) []*corev3.HeaderValueOption {
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
