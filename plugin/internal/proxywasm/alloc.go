package proxywasm

import "unsafe"

// arena hands memory to the host (proxy_on_memory_allocate) and keeps every
// block reachable until the plugin takes it back, so the Go garbage collector
// never frees memory the host is still writing or the plugin still reading.
//
// Small blocks come from one reusable scratch buffer, so a request's header
// map costs no allocation; a block the scratch cannot hold is allocated and
// kept in live. reserve grows the scratch ahead of a host call whose size is
// known (an HTTP call's body), so the allocation happens in ordinary plugin
// code and not inside proxy_on_memory_allocate, where Envoy refuses most host
// calls the Go runtime might make while collecting garbage.
type arena struct {
	scratch []byte
	busy    bool // scratch handed out and not yet taken back
	live    [][]byte
}

// minScratch is the scratch buffer's initial size: a typical request's header
// map fits.
const minScratch = 16 << 10

// alloc returns a block of at least size bytes that stays referenced until
// take or reset.
func (a *arena) alloc(size uint32) []byte {
	if a.scratch == nil {
		a.scratch = make([]byte, minScratch)
	}
	if !a.busy && int(size) <= len(a.scratch) {
		a.busy = true
		return a.scratch[:size:size]
	}
	n := size
	if n == 0 {
		n = 1 // a real address, never 0 (which the host reads as failure)
	}
	b := make([]byte, n)
	a.live = append(a.live, b)
	return b[:size]
}

// take returns the block at addr, of size bytes, that alloc handed out, and
// releases the arena's reference to it. It reports false if addr is not a block
// of this arena or is shorter than size.
func (a *arena) take(addr, size uint32) ([]byte, bool) {
	if a.busy && addr == addrOf(a.scratch) {
		if int(size) > len(a.scratch) {
			return nil, false
		}
		a.busy = false
		return a.scratch[:size:size], true
	}
	for i, b := range a.live {
		if addr != addrOf(b[:cap(b)]) {
			continue
		}
		last := len(a.live) - 1
		a.live[i] = a.live[last]
		a.live[last] = nil
		a.live = a.live[:last]
		if int(size) > cap(b) {
			return nil, false
		}
		return b[:size:size], true
	}
	return nil, false
}

// reserve grows the scratch buffer to hold at least size bytes.
func (a *arena) reserve(size int) {
	if size > len(a.scratch) {
		a.scratch = make([]byte, size)
		a.busy = false
	}
}

// reset drops every outstanding block: called when a callback starts, since no
// block outlives the callback whose host call asked for it.
func (a *arena) reset() {
	a.busy = false
	clear(a.live)
	a.live = a.live[:0]
}

func addrOf(b []byte) uint32 {
	if cap(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}
