// Package policy embeds nexus' default policy: the Rego that answers
// application checks (nexus.authz) and proxied HTTP requests
// (nexus.envoy), and its data (route rules, ABAC conditions, headers).
// `nexus serve` compiles it when no --policy is given.
//
// The directory holds only the Rego files, data.json and this file, so a
// copy of it is a policy directory to start from:
//
//	cp -r defaults/policy my-policy
//	nexus serve --policy my-policy
package policy

import "embed"

// FS holds authz.rego, envoy.rego and data.json.
//
//go:embed authz.rego envoy.rego data.json
var FS embed.FS

// Entrypoints of the default policy.
const (
	// EnvoyEntrypoint answers proxied HTTP requests with an
	// opa-envoy-plugin result object.
	EnvoyEntrypoint = "nexus/envoy/result"
	// AuthzEntrypoint answers application checks with {"allow", "reason"}.
	AuthzEntrypoint = "nexus/authz/decision"
)
