// Package proxywasm is nexus' own small layer over the Proxy-Wasm ABI 0.2.1,
// written for the standard Go toolchain (GOOS=wasip1, -buildmode=c-shared):
// callbacks are exported with //go:wasmexport and host calls imported with
// //go:wasmimport, every width int32/uint32.
//
// The package has two halves. The part without build constraints (ABI
// constants, the Handler and Host interfaces, the header map codec, the
// allocator's bookkeeping) compiles everywhere and is tested natively. The
// wasip1 half (exports_wasip1.go, host_wasip1.go) binds them to the real ABI:
// the exported proxy_on_* functions dispatch to the Handler given to
// SetHandler, and WasmHost implements Host with the imported proxy_* calls.
//
// Example (the filter's main package):
//
//	func init() { proxywasm.SetHandler(edge.NewFilter(proxywasm.WasmHost{})) }
//	func main() {}
//
// # Caveats
//
//   - Memory the host asks for through proxy_on_memory_allocate stays
//     referenced by the allocator until the host call that asked for it has
//     returned and the plugin has taken it back (Host methods do this), and in
//     any case until the next callback starts. Byte slices and Pairs a Host
//     method returns are only valid until the next Host call.
//   - Nothing here starts a goroutine, a timer or a sleep: Envoy's Wasm host
//     gives a Go module no way to wake it up except its callbacks.
//   - SetHandler must be called from an init function; init runs inside
//     _initialize, where Envoy refuses every proxy_* call but proxy_log.
package proxywasm
