package lab

import "embed"

// Copies of what the product embeds in its internal packages, which this
// module may not import; TestCopiesMatchTheProduct keeps them equal.
var (
	// driveSchema is defaults/drive/schema.yaml.
	//
	//go:embed drive-schema.yaml
	driveSchema []byte

	// allowAll holds allowall/, a copy of defaults/allowall: an
	// allow-only policy (its envoy and authz entrypoints allow every
	// request), the baseline.
	//
	//go:embed allowall/envoy.rego allowall/authz.rego
	allowAll embed.FS
)
