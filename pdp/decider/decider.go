// Package decider is the seam through which the decision core decides
// without entering a policy's Wasm: when a policy loads, the core offers
// it to each configured Factory; the first that recognises it returns a
// Decider, which answers the checks it is sure to answer exactly as the
// Wasm would and declines the others, which the Wasm then decides. When
// no factory accepts a policy, its Wasm decides every check.
//
// The package names no policy: a policy's Go decider lives beside its
// Rego (nexus' default policy's in defaults/policy) and is wired
// in by the program (nexus serve) or the tests, never by the core.
package decider

import "context"

// Policy is what a Factory sees of a policy being loaded.
type Policy struct {
	// WasmSHA256 is the hex SHA-256 digest of the policy's Wasm module:
	// a factory recognises the policy it decides by it.
	WasmSHA256 string
	// Data is the policy's data as the core loads it (JSON, with the
	// schema's roles and permissions and data.nexus.route_table). It is
	// read-only.
	Data []byte
	// EnvoyEntrypoint and AuthzEntrypoint are the entrypoints the core
	// evaluates for proxied requests and for application checks.
	EnvoyEntrypoint, AuthzEntrypoint string
}

// Factory returns the Decider of the policy p, or nil when it does not
// decide p (the Wasm then decides).
type Factory func(p *Policy) Decider

// Decider decides checks of one loaded policy in Go. Its methods are
// safe for concurrent use. ok false declines: the core builds the input
// document and evaluates the Wasm, which answers (or fails) as the
// policy defines; a Decider declines every input it is not sure to read
// as the Wasm does and every store error.
type Decider interface {
	// Decides reports whether the Decider answers entrypoint at all.
	Decides(entrypoint string) bool
	// Envoy answers a proxied request given by its fields.
	Envoy(ctx context.Context, r *Request) (a Answer, ok bool)
	// EnvoyKey appends what Envoy reads of r, unambiguously: two requests
	// with the same key get the same answer from the same store. It keys
	// the decision cache.
	EnvoyKey(dst []byte, r *Request) []byte
	// Authz answers an application check given by its fields.
	Authz(ctx context.Context, c *Check) (a Answer, ok bool)
	// AuthzKey appends what Authz reads of c, as EnvoyKey does.
	AuthzKey(dst []byte, c *Check) []byte
	// Eval appends to dst the result document entrypoint's Wasm would
	// write for the input document input (as the core writes it, maybe
	// pruned to what the policy reads), for the checks the core cannot
	// give as fields (an application check with attributes or a
	// context).
	Eval(ctx context.Context, entrypoint string, input, dst []byte) (out []byte, ok bool)
}

// Request is a proxied request (Envoy's or forward auth's) given by the
// fields of its input document a policy reads.
type Request struct {
	// Method is attributes.request.http.method.
	Method string
	// Path is parsed_path.
	Path []string
	// Headers is attributes.request.http.headers.
	Headers map[string]string
	// JWT is the JSON of the jwt_authn filter's metadata, nil when the
	// request has none.
	JWT []byte
}

// Check is an application check given by its fields: the subject's type
// and id, the action, the resource's type, id and tenant ("" for an
// absent id or tenant). The resource has no attributes, or with
// TenantAttribute the one attribute "tenant" whose value is Fields[5];
// the check has no other attributes and no context.
type Check struct {
	Fields          [6]string
	TenantAttribute bool
}
