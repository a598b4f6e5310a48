// Package allowall embeds an allow-only policy: its envoy and authz
// entrypoints (nexus/envoy/result, nexus/authz/decision) allow every
// request. nexus-bench (the lab in bench/) runs it as the baseline, so
// the cost of nexus' real policy shows as the difference.
//
//	nexus serve --policy defaults/allowall
//
// # Caveats
//
// It allows everything: never deploy it.
package allowall

import "embed"

// FS holds envoy.rego and authz.rego.
//
//go:embed envoy.rego authz.rego
var FS embed.FS
