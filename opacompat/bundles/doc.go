// Package bundles fetches policy bundles from a bundle server the way
// OPA's bundle plugin does, so that a deployment that already publishes
// bundles for OPA (and opa-envoy-plugin) points nexus at the same server.
//
// [ParseConfig] reads the bundles and keys sections of an OPA
// configuration. A [Syncer] then polls each bundle's resource on its
// service: with ETags (If-None-Match; 304 means unchanged), with long
// polling when configured and the server supports it (OPA's
// "Prefer: wait=N" request header and the
// application/vnd.openpolicyagent.bundles response content type), and
// with exponential back-off and jitter after errors. Each new bundle is
// checked (size, archive paths, signatures when signing is configured, as
// OPA verifies them), turned into a nexus bundle and handed to
// Options.OnBundle. Whatever fails, the last good bundle keeps serving and
// the error is kept for [Syncer.Status], in the shape of OPA's bundle
// status.
//
// Example:
//
//	srcs, err := bundlesync.ParseConfig(cfg.Bundles, cfg.Keys, services)
//	if err != nil {
//		return err
//	}
//	s, err := bundlesync.New(bundlesync.Options{
//		Sources: srcs,
//		Dir:     filepath.Join(dataDir, "bundles"),
//		Compile: func(ctx context.Context, raw []byte) (*bundle.Bundle, error) {
//			return policyload.FromTarGz(ctx, bytes.NewReader(raw), opts)
//		},
//		OnBundle: core.Load, // the decision core (pdp.PDP) the server serves
//		Logger:   log,
//	})
//	if err != nil {
//		return err
//	}
//	_ = s.LoadPersisted(ctx) // the last good bundle decides from the start
//	go s.Run(ctx)
//
// [Sign] adds a .signatures.json to a bundle tarball that OPA's verifier
// (and this package) accepts.
//
// # Caveats
//
//   - nexus serves one policy: the configuration may name one bundle.
//   - Delta bundles are refused; snapshot bundles only.
//   - The size limit bounds the download and the sum of the unpacked
//     files (OPA bounds each file).
//   - Archives holding links, devices, or paths that leave the bundle
//     (".." or absolute) are refused.
package bundles
