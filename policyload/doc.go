// Package policyload turns any policy source a user can point nexus at into
// a compiled [bundle.Bundle]:
//
//   - a single .rego file or a directory of Rego and JSON/YAML data files,
//     compiled with nexus' compiler;
//   - an OPA bundle (.tar.gz) as `opa build` writes it, or a bundle
//     directory (one with a .manifest, as `opa run --bundle` reads it):
//     Rego sources, data.json files and a .manifest, compiled for the
//     configured entrypoints, keeping the manifest's revision, roots and
//     metadata;
//   - a nexus bundle (or `opa build -t wasm` output) holding policy.wasm,
//     used as it is.
//
// A bundle holding both a Wasm module and Rego sources is used as it is
// when its Wasm exposes every requested entrypoint, and compiled from its
// Rego otherwise.
//
// Example:
//
//	b, err := policyload.Load(ctx, "policy/", policyload.Options{
//		Entrypoints: []string{"envoy/authz/allow"},
//	})
//
// A bundle fetched over the network is read with [FromTarGz]:
//
//	b, err := policyload.FromTarGz(ctx, resp.Body, opts)
//
// # Caveats
//
//   - Bundle directories are read as OPA reads them: symbolic links are
//     not followed.
//   - [Options.Ignore] takes `opa run --ignore` patterns with OPA's
//     meaning. In an archive, a directory pattern skips the files under
//     that directory whether or not the archive lists the directory
//     itself (OPA skips them only when it does).
//   - Archives are read whole into memory, within the limits of
//     [bundle.MaxBytes] (compressed archive and the sum of its files).
//     Entries other than regular files and directories (symbolic and hard
//     links, devices) and names that climb out of the archive ("..") are
//     refused.
//   - Signatures (.signatures.json) are not verified here; delta bundles
//     (patch.json) are refused.
//   - All Rego files of one bundle must share one Rego version (the
//     manifest's rego_version, or v1).
package policyload
