// Package bundle is nexus' policy bundle format: the types (a [Bundle] of
// a Wasm module, base data and a [Manifest] with revision, roots,
// entrypoints, the input paths the policy reads and the non-deterministic
// builtins each entrypoint can reach), the archive reader
// and writer, and the declarations of nexus' host builtins
// ([NexusBuiltins]).
//
// A bundle is an OPA-format .tar.gz holding /policy.wasm (the policy
// compiled for OPA's Wasm ABI), /data.json (the base data document, a
// JSON object) and /.manifest (OPA's manifest, entrypoints as wasm
// resolvers). Package compiler writes bundles; package engine runs them.
// Both depend on this package, which depends on neither, nor on OPA's
// parser, compiler or loader: besides the standard library it uses only
// OPA's types package, for the builtins' declarations.
//
// Example:
//
//	f, err := os.Open("bundle.tar.gz")
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	b, err := bundle.Read(f)
//	if err != nil {
//		return err // wraps bundle.ErrInvalid or bundle.ErrTooLarge
//	}
//	err = eng.Load(ctx, b)
//
// # Caveats
//
//   - Read reads at most [MaxBytes] compressed, and holds the archive to
//     [Limits] as it decompresses it: [MaxBytes] in all, [MaxFileBytes] a
//     file, [DefaultMaxDataBytes] for data.json ([ReadLimited] sets
//     others). A file over a limit is refused from its tar header, before
//     its bytes are read, with a [*LimitError] naming the limit.
//   - Read checks the shape of the archive, not the module: that the Wasm
//     module runs, and that it exports the manifest's entrypoints, is
//     checked by the engine when it loads the bundle.
//   - Files other than the three above (Rego sources, OPA's signatures)
//     are ignored: Read checks no signature. `nexus compile --signing-key`
//     signs bundles, and `nexus serve` verifies the signatures of bundles
//     it fetches from a bundle server, as OPA does.
//   - [Manifest.InputPaths] and [Manifest.Nondeterministic] are only known
//     for bundles built by nexus' compiler; for any other bundle the policy
//     may read all of input and may call non-deterministic builtins.
package bundle
