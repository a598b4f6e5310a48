// Command plugin is nexus' proxy-wasm edge filter: an Envoy HTTP filter that
// answers pure RBAC decisions from a snapshot pulled from the PDP and lets
// everything else go on to the ext_authz filter.
//
// It is built with the standard Go toolchain as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin/plugin.wasm ./plugin
//
// (or make plugin). Built natively it is an empty program, so the module's
// tests and tools can compile it. See README.md for the configuration, the
// snapshot format and the minimum Envoy version.
//
// # Caveats
//
//   - No goroutines, timers or sleeps: refresh happens on proxy_on_tick.
//   - The snapshot's age is measured on the proxy's clock from the last reply
//     (200 or 304) that confirmed it, not from its generated_at, so clock skew
//     between proxy and PDP does not matter.
package main
