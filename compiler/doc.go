// Package compiler turns Rego policies and data into nexus bundles: an
// OPA-format archive holding the policy compiled to WebAssembly
// (/policy.wasm), the base data document (/data.json) and a manifest
// (/.manifest with revision, roots and entrypoints).
//
// Compilation uses OPA's own compiler with its wasm target and capabilities
// that declare nexus' host builtins ([NexusBuiltins]), so policies may call
// nexus.check and friends; the engine package provides their implementations
// at evaluation time.
//
// Example:
//
//	b, err := compiler.Compile(ctx, compiler.Options{
//		Paths:       []string{"policy/"},
//		Entrypoints: []string{"nexus/authz/allow"},
//	})
//	if err != nil {
//		return err // *compiler.Errors: one "file:line:col: message" per line
//	}
//	err = b.Write(f)
//
// # Caveats
//
//   - Policies are parsed as Rego v1 unless [Options.RegoV0] is set.
//   - The default optimisation level is 0: OPA's optimiser partially evaluates
//     rules against data under the bundle roots, which would fold data into
//     the module; level 0 keeps data-reading rules as they are so that data
//     can change without a recompile. Higher levels treat data under
//     [Options.Roots] as known.
//   - Bundles are not signed yet.
//   - [ReadBundle] reads at most [MaxBundleBytes] of uncompressed content.
package compiler
