// Package policy embeds the default nexus policy: the Rego that answers
// application checks (nexus.authz) and proxied HTTP requests
// (nexus.envoy), and its data (route rules, ABAC conditions, headers).
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
