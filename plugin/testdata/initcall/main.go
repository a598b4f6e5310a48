// Command initcall is a Proxy-Wasm module that breaks Envoy's rule for
// _initialize: its init function calls proxy_set_tick_period_milliseconds.
package main

import "unsafe"

//go:wasmimport env proxy_set_tick_period_milliseconds
func setTickPeriod(ms uint32) uint32

var buf = make([]byte, 1024)

func init() { setTickPeriod(1000) }

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func allocate(size uint32) uint32 { return uint32(uintptr(unsafe.Pointer(&buf[0]))) }

func main() {}
