// Package confcheck validates nexus' deployment files offline, the way the
// programs that read them would: Envoy bootstrap files against
// go-control-plane's types and generated validation rules, Istio resources
// against Istio's CRD schemas and proto types, Kubernetes manifests against
// k8s.io/api types, and docker-compose files for the files they mount.
//
// Every check is strict: an unknown field anywhere, including inside a
// google.protobuf.Any, is an error.
//
//	b, err := confcheck.EnvoyBootstrap(data)
//	if err != nil { ... } // a typo, an unresolvable typed_config, a rule broken
//	_ = b
//
// Beyond the schemas, rules check what a file means, and fail with
// ErrUnsafe where a valid file would not work or would open a hole:
// AuthzHeaders and MeshAuthzHeaders (the authorization service gets every
// header the policy reads), RequireJWT and JWTToAuthz (a JWT is verified
// and what jwt_authn verified reaches ext_authz), IdentityHeadersStripped
// and IstioIdentity (a client cannot send its own identity header),
// WasmPluginsSafe (an edge filter reading identity runs after
// authentication and is pinned by digest), AdminClosed, ComposeAdminClosed
// and DockerfileAdminClosed (no open admin listener, no Service publishing
// it), NoDemoData and OneStore (Kubernetes serves its own data from one
// persistent store), EnvoyImagesAtLeast (Envoy is recent enough for the
// edge filter) and ProxyIdentity (nginx, Caddy and HAProxy pass nexus only
// a user they verified).
//
// # Caveats
//
// Only what can be checked without running the program is checked: an
// Envoy extension that validates its own configuration at load time beyond
// its proto rules (for example a Wasm module's JSON configuration) is
// checked here only as far as nexus' own files describe it.
package confcheck
