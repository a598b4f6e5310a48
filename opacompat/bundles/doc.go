// Package bundles fetches policy bundles from a bundle server the way
// OPA's bundle plugin does, so that a deployment that already publishes
// bundles for OPA (and opa-envoy-plugin) points nexus at the same server.
//
// [ParseConfig] reads the bundles and keys sections of an OPA
// configuration. A [Syncer] then fetches each bundle with OPA's own
// downloader (package download of OPA): ETags (If-None-Match; 304 means
// unchanged), long polling when configured and the server supports it
// (OPA's "Prefer: wait=N" request header and the
// application/vnd.openpolicyagent.bundles response content type),
// exponential back-off and jitter after errors, and OPA's bundle reader,
// which verifies signatures when signing is configured. What this package
// adds is what nexus does differently: it asks for snapshot bundles only,
// bounds the whole download and the unpacked archive, refuses unsafe
// archives, turns each new bundle into a nexus bundle (Options.Compile)
// and hands it to Options.OnBundle, persists the last good archive, and
// says why a bundle was refused (ErrTooLarge, ErrUnsafeArchive,
// ErrVerification, ErrDelta). Whatever fails, the last good bundle keeps
// serving and the error is kept for [Syncer.Status], in the shape of OPA's
// bundle status.
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
//   - Run polls the periodic bundles; Trigger leaves those alone while
//     Run polls them (OPA's downloader fetches one request at a time).
//   - The back-off after an error is OPA's: from 100ms, growing by 1.6
//     per error up to max_delay_seconds, with 20% jitter.
package bundles
