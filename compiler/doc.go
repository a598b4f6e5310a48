// Package compiler turns Rego policies and data into nexus bundles
// ([bundle.Bundle]): the policy compiled to WebAssembly, the base data
// document and a manifest with revision, roots, entrypoints, the paths of
// input the policy reads and, for each entrypoint, the non-deterministic
// builtins it can reach ([bundle.Manifest.Nondeterministic]: a decision
// cache must not reuse decisions that read a clock, randomness or the
// network). Package bundle reads and writes the archive.
//
// Compilation uses OPA's own compiler with its wasm target and capabilities
// that declare nexus' host builtins ([bundle.NexusBuiltins]), so policies
// may call nexus.check and friends; the engine package provides their
// implementations at evaluation time.
//
// Before OPA's compiler sees them, the modules are rewritten in two ways
// that keep OPA's answers: calls of a few OPA builtins go to the host's
// versions, which answer as OPA's evaluator does where the WebAssembly
// runtime's do not (json.marshal, concat of a set, to_number, base64
// decoding, CIDR containment, regular expressions) or cost less
// (glob.match, split, regex.match); and each body reads a prefix of input
// it uses again, or inside a loop, once, in front of the loop, and builds
// the constant arrays, objects and sets a loop reads once (OPA's planner
// evaluates every reference from the root and builds every literal on
// each use).
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
//   - Which non-deterministic builtins an entrypoint reaches is found on
//     the policy as written, before optimisation, and errs on the side of
//     caution: a builtin counts in any rule the entrypoint may refer to
//     (a dynamic reference data.x[k] refers to every rule under data.x),
//     even in a branch the optimiser removes or where `with` replaces it.
//     Only http.send with "cache": true or "force_cache": true written as
//     a constant in its request object does not count: that is the policy
//     author's opt-in to reuse a response, as in OPA (a cached decision is
//     then reused until the policy or the data changes, whatever the
//     response's Cache-Control says).
//   - Bundles are not signed yet.
package compiler
