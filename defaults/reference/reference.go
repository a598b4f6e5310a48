// Package reference embeds the default policy as it was written before
// its route matching, tenant resolution, RBAC and ReBAC moved into host
// builtins (nexus.route, nexus.resource_tenant, nexus.grant): the same
// decisions, spelled out in Rego. It is the specification the default
// policy is tested against, evaluated by OPA's own evaluator, on the
// default policy's data.
package reference

import "embed"

// FS holds authz.rego and envoy.rego (the data is the default policy's).
//
//go:embed authz.rego envoy.rego
var FS embed.FS
