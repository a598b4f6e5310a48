// Command alloccall is a Proxy-Wasm module that breaks Envoy's rule for
// proxy_on_memory_allocate: it calls proxy_set_tick_period_milliseconds from
// there. Its proxy_on_configure reads the configuration, which makes the host
// allocate.
package main

import "unsafe"

//go:wasmimport env proxy_set_tick_period_milliseconds
func setTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func getBufferBytes(t, start, max uint32, ptr, size *uint32) uint32

var (
	buf       = make([]byte, 1024)
	ptr, size uint32
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(n uint32) uint32 {
	setTickPeriod(1000)
	return uint32(uintptr(unsafe.Pointer(&buf[0])))
}

//go:wasmexport proxy_on_context_create
func contextCreate(id, parent uint32) {}

//go:wasmexport proxy_on_vm_start
func vmStart(id, size uint32) uint32 { return 1 }

//go:wasmexport proxy_on_configure
func configure(id, n uint32) uint32 {
	return 1 - getBufferBytes(7, 0, n, &ptr, &size)
}

func main() {}
