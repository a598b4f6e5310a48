// Package edge is the decision logic of nexus' proxy-wasm edge filter, kept
// free of the Wasm ABI so it runs and is tested natively: the plugin
// configuration (Config, ParseConfig), route rules (method and path pattern
// to action and resource type, tenant from a {tenant} path segment or a
// header), the subject (a header, or a claim of a JWT payload jwt_authn has
// verified), the compiled RBAC snapshot (Snapshot, from api.EdgeSnapshot) and
// the Filter, a proxywasm.Handler that polls the snapshot on ticks and
// decides each request's headers.
//
// Example (what the plugin's main package does):
//
//	proxywasm.SetHandler(edge.NewFilter(proxywasm.WasmHost{}))
//
// and in a test, with any proxywasm.Host:
//
//	f := edge.NewFilter(host)
//	f.OnContextCreate(1, 0)
//	ok := f.OnConfigure(1, len(config))
//	f.OnTick(1) // sends the snapshot request
//
// # Caveats
//
//   - A decision is Allow or Deny only when the snapshot can answer it: an
//     RBAC resource type and a subject the snapshot lists. Everything else is
//     Pass, and the request goes on untouched to ext_authz.
//   - The snapshot's age is measured on the proxy's clock from the last reply
//     (200 or 304) that confirmed it; past Config.MaxAgeMS no decision is
//     taken (Config.OnNoSnapshot applies).
//   - Paths with "." or ".." segments, percent-encoding or backslashes are
//     passed on: the upstream might normalise them into a path the route
//     rules did not see.
//   - Request counts reach the proxy's metrics on the next tick or snapshot
//     reply, not per request.
//   - A Filter is used by one VM thread; it is not safe for concurrent use.
package edge
