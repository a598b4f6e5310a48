// Package extauthz puts nexus' policy engine and relationship store behind
// the interfaces that proxies and applications already speak:
//
//   - Envoy's ext_authz gRPC v3 service (envoy.service.auth.v3.Authorization)
//     with the opa-envoy-plugin input document, so OPA-Envoy policies run
//     unchanged, and the gRPC health service;
//   - HTTP ext_authz and forward auth under /ext_authz/ (Envoy http_service,
//     nginx auth_request, Caddy forward_auth, Traefik ForwardAuth);
//   - the AuthZEN Authorization API 1.0: /access/v1/evaluation[s], the
//     subject, resource and action searches under /access/v1/search/, and
//     the metadata document /.well-known/authzen-configuration;
//   - the Permit-compatible PDP API: /allowed, /allowed/bulk,
//     /allowed/all-tenants, /allowed_url, /nginx_allowed, /kong,
//     /user-permissions, /user-tenants and /authorized_users;
//   - an API key (Config.AppAPIKey) on the application endpoints;
//   - an admin API (relationships, schema, policy bundle, edge snapshot)
//     behind a bearer token, with /metrics, /healthz and /readyz;
//   - a diagnostic listener (Config.DiagnosticAddr) with /health as OPA
//     answers it, /healthz, /readyz and /metrics alone, as opa run's
//     --diagnostic-addr.
//
// opa-envoy-plugin's settings are Config fields (GRPCMaxRecvMsgSize,
// GRPCMaxSendMsgSize, PerformanceMetrics: its grpc_request_duration_seconds
// and error_counter; a Unix socket as GRPCAddr) or, where they change
// decisions, pdp.Config fields (DryRun, SkipRequestBodyParse).
//
// A Server owns the listeners and serves one decision core (package pdp)
// that its caller built and closes; each interface is a thin transport
// under internal/ that maps its wire format to the core and back, and
// internal/wire maps error codes to HTTP and gRPC statuses in one place.
//
//	reg := extauthz.NewRegistry()
//	p, err := pdp.New(ctx, pdp.Config{Engine: eng, Store: store, Policy: bundle, Registerer: reg})
//	if err != nil { ... }
//	defer p.Close(ctx) // after the server's shutdown: flushes the decision log
//	srv, err := extauthz.New(extauthz.Config{PDP: p, Store: store, Registerer: reg})
//	if err != nil { ... }
//	if err := srv.Start(ctx); err != nil { ... }
//	select { case <-ctx.Done(): case err = <-srv.Failed(): } // a listener that stopped for good
//	err = errors.Join(err, srv.Shutdown(shutdownCtx)) // in-flight requests finish until shutdownCtx ends
//
// # Caveats
//
// The decision path fails closed: an input that cannot be built, an
// evaluation error or a result that is not a decision all deny, with a
// coded reason that is also the metric label. Over ext_authz gRPC the
// answers are opa-envoy-plugin's: a failure other than a request that does
// not parse is a gRPC error, which Envoy denies unless its
// failure_mode_allow is set. Envoy CheckRequests carry
// per-request headers (x-request-id), so their cache hit ratio is low by
// nature; the cache pays off for application checks.
package extauthz
