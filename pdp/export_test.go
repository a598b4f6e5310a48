package pdp

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/pdp/internal/input"
)

// EvalNative is the loaded view's native evaluation of entrypoint on
// input, without the Wasm's fallback: ok is false when the native
// evaluation defers to the Wasm (or the policy is not the default one).
func (p *PDP) EvalNative(ctx context.Context, entrypoint string, input []byte) ([]byte, bool) {
	v := p.view.Load()
	if !v.decides(entrypoint) {
		return nil, false
	}
	return v.decider.Eval(ctx, entrypoint, input, nil)
}

// EnvoyFieldsPath decides req as Envoy does, on the path that reads its
// fields without writing its input document; ok is false when that path
// did not decide.
func (p *PDP) EnvoyFieldsPath(ctx context.Context, req *authv3.CheckRequest) (Decision, error, bool) {
	h := req.GetAttributes().GetRequest().GetHttp()
	md := meta{action: h.GetMethod(), resource: h.GetPath(), envoy: true}
	return p.envoyFields(ctx, IfaceGRPC, md, func(dst []byte, f *input.Fields) ([]byte, error) {
		return input.EnvoyFields(dst, req, input.Options{SkipBody: p.cfg.SkipRequestBodyParse}, f)
	})
}

// HTTPFieldsPath is EnvoyFieldsPath for a forward-auth request.
func (p *PDP) HTTPFieldsPath(ctx context.Context, req *HTTPRequest, source string) (Decision, error, bool) {
	md := meta{action: req.Method, resource: req.Path, envoy: true}
	return p.envoyFields(ctx, IfaceHTTP, md, func(dst []byte, f *input.Fields) ([]byte, error) {
		return input.HTTPFields(dst, req, source, input.Options{SkipBody: p.cfg.SkipRequestBodyParse}, f)
	})
}

// CheckFieldsPath is EnvoyFieldsPath for an application check.
func (p *PDP) CheckFieldsPath(ctx context.Context, c *Check) (Decision, error, bool) {
	md := meta{subject: c.Subject.Type + ":" + c.Subject.ID, action: c.Action, resource: c.Resource.Type + ":" + c.Resource.ID}
	return p.checkFields(ctx, IfacePermit, md, c)
}
