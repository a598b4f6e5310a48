//go:build wasip1

package proxywasm

import "unsafe"

var (
	handler Handler
	mem     arena
)

// SetHandler installs the Handler the exported callbacks dispatch to. Call it
// from an init function of the main package.
func SetHandler(h Handler) { handler = h }

//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion021() {}

//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) uint32 {
	b := mem.alloc(size)
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b[:cap(b)]))))
}

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootID uint32, vmConfigSize uint32) uint32 {
	mem.reset()
	if handler == nil {
		return 0
	}
	return boolWord(handler.OnVMStart(int(vmConfigSize)))
}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(id, parentID uint32) {
	mem.reset()
	if handler != nil {
		handler.OnContextCreate(id, parentID)
	}
}

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootID uint32, configSize uint32) uint32 {
	mem.reset()
	if handler == nil {
		return 0
	}
	return boolWord(handler.OnConfigure(rootID, int(configSize)))
}

//go:wasmexport proxy_on_tick
func proxyOnTick(rootID uint32) {
	mem.reset()
	if handler != nil {
		handler.OnTick(rootID)
	}
}

//go:wasmexport proxy_on_http_call_response
func proxyOnHTTPCallResponse(rootID, token, numHeaders, bodySize, numTrailers uint32) {
	mem.reset()
	if handler != nil {
		handler.OnHTTPCallResponse(rootID, token, int(numHeaders), int(bodySize), int(numTrailers))
	}
}

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(id, numHeaders, endOfStream uint32) uint32 {
	mem.reset()
	if handler == nil {
		return uint32(ActionContinue)
	}
	return uint32(handler.OnRequestHeaders(id, int(numHeaders), endOfStream != 0))
}

//go:wasmexport proxy_on_done
func proxyOnDone(id uint32) uint32 {
	mem.reset()
	if handler == nil {
		return 1
	}
	return boolWord(handler.OnDone(id))
}

//go:wasmexport proxy_on_delete
func proxyOnDelete(id uint32) {
	mem.reset()
	if handler != nil {
		handler.OnDelete(id)
	}
}

func boolWord(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
