package pdp

import "context"

// EvalNative is the loaded view's native evaluation of entrypoint on
// input, without the Wasm's fallback: ok is false when the native
// evaluation defers to the Wasm (or the policy is not the default one).
func (p *PDP) EvalNative(ctx context.Context, entrypoint string, input []byte) ([]byte, bool) {
	v := p.view.Load()
	if v == nil || v.native == nil {
		return nil, false
	}
	switch entrypoint {
	case DefaultEnvoyEntrypoint:
		return v.native.Envoy(ctx, input, nil)
	case DefaultAuthzEntrypoint:
		return v.native.Authz(ctx, input, nil)
	}
	return nil, false
}
