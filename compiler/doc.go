// Package compiler turns Rego policies and data into nexus bundles
// ([bundle.Bundle]): the policy compiled to WebAssembly, the base data
// document and a manifest with revision, roots, entrypoints and the paths
// of input the policy reads. Package bundle reads and writes the archive.
//
// Compilation uses OPA's own compiler with its wasm target and capabilities
// that declare nexus' host builtins ([bundle.NexusBuiltins]), so policies
// may call nexus.check and friends; the engine package provides their
// implementations at evaluation time.
//
// Example:
//
//	b, err := compiler.Compile(ctx, compiler.Options{
//		Paths:       []string{"policy/"},
//		Entrypoints: []string{"nexus/authz/allow"},
//	})
//	if err != nil {
//		return err // compiler.Errors: one "file:line:col: message" per line
//	}
//	err = b.Write(f)
//
// # Caveats
//
//   - Policies are parsed as Rego v1 unless [Options.RegoV0] is set.
//   - Optimisation (levels 1 and 2) never folds data into the module: OPA's
//     compiler is given the policy alone, with the packages as its roots, so
//     every data reference outside the packages' paths stays a runtime
//     lookup and data.json can change without a recompile. Keep base data
//     out of the packages' own paths (data.<package>.x that is not a rule)
//     when optimising: that data would be read as empty.
//   - Bundles are not signed yet.
package compiler
