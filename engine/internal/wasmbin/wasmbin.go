// Package wasmbin rewrites OPA policy modules so that one compiled module can
// be instantiated many times in one wazero runtime: the memory the policy
// imports from "env" becomes a memory the module defines itself, with the
// engine's page limit.
package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrMalformed reports a module that is not well-formed WebAssembly or does
// not have the shape of an OPA policy module.
var ErrMalformed = errors.New("wasmbin: malformed module")

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

const (
	secCustom = 0
	secImport = 2
	secMemory = 5
)

// DefineMemory returns a copy of mod in which the (single) imported memory
// is replaced by a defined memory of minPages pages (at least the import's
// minimum) and at most maxPages pages. It returns the import's minimum.
func DefineMemory(mod []byte, maxPages uint32) ([]byte, uint32, error) {
	if len(mod) < 8 || !bytes.Equal(mod[:8], header) {
		return nil, 0, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	out := make([]byte, 0, len(mod)+16)
	out = append(out, header...)
	var (
		memMin      uint32
		found       bool
		inserted    bool
		memSection  []byte
		sawMemorySc bool
	)
	p := 8
	for p < len(mod) {
		id := mod[p]
		size, n, err := readU32(mod, p+1)
		if err != nil {
			return nil, 0, err
		}
		start := p + 1 + n
		end := start + int(size)
		if end > len(mod) || end < start {
			return nil, 0, fmt.Errorf("%w: section %d overruns module", ErrMalformed, id)
		}
		body := mod[start:end]
		p = end
		if id == secMemory {
			sawMemorySc = true
		}
		if found && !inserted && id != secCustom && id > 4 && id != secMemory {
			out = append(out, memSection...)
			inserted = true
		}
		if id != secImport {
			out = append(out, mod[start-1-n:end]...)
			continue
		}
		newBody, mn, ok, err := dropMemoryImport(body)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			out = append(out, mod[start-1-n:end]...)
			continue
		}
		found, memMin = true, mn
		out = append(out, secImport)
		out = appendU32(out, uint32(len(newBody)))
		out = append(out, newBody...)
		minPages := memMin
		if maxPages != 0 && minPages > maxPages {
			return nil, 0, fmt.Errorf("%w: module needs %d memory pages, limit is %d", ErrMalformed, minPages, maxPages)
		}
		var ms []byte
		ms = appendU32(ms, 1)
		if maxPages == 0 {
			ms = append(ms, 0x00)
			ms = appendU32(ms, minPages)
		} else {
			ms = append(ms, 0x01)
			ms = appendU32(ms, minPages)
			ms = appendU32(ms, maxPages)
		}
		memSection = append([]byte{secMemory}, appendU32(nil, uint32(len(ms)))...)
		memSection = append(memSection, ms...)
	}
	if !found {
		return nil, 0, fmt.Errorf("%w: no imported memory", ErrMalformed)
	}
	if sawMemorySc {
		return nil, 0, fmt.Errorf("%w: module both imports and defines memory", ErrMalformed)
	}
	if !inserted {
		out = append(out, memSection...)
	}
	return out, memMin, nil
}

// dropMemoryImport removes the memory import from an import section body.
func dropMemoryImport(body []byte) ([]byte, uint32, bool, error) {
	count, n, err := readU32(body, 0)
	if err != nil {
		return nil, 0, false, err
	}
	p := n
	var kept [][]byte
	var memMin uint32
	found := false
	for i := uint32(0); i < count; i++ {
		entryStart := p
		for range 2 { // module name, field name
			l, n, err := readU32(body, p)
			if err != nil {
				return nil, 0, false, err
			}
			p += n + int(l)
			if p > len(body) || p < 0 {
				return nil, 0, false, fmt.Errorf("%w: import name overruns section", ErrMalformed)
			}
		}
		if p >= len(body) {
			return nil, 0, false, fmt.Errorf("%w: import truncated", ErrMalformed)
		}
		kind := body[p]
		p++
		switch kind {
		case 0x00: // function: type index
			_, n, err := readU32(body, p)
			if err != nil {
				return nil, 0, false, err
			}
			p += n
		case 0x01: // table: reftype, limits
			if p >= len(body) {
				return nil, 0, false, fmt.Errorf("%w: table import truncated", ErrMalformed)
			}
			p++
			_, n, err := readLimits(body, p)
			if err != nil {
				return nil, 0, false, err
			}
			p += n
		case 0x02: // memory: limits
			mn, n, err := readLimits(body, p)
			if err != nil {
				return nil, 0, false, err
			}
			p += n
			if found {
				return nil, 0, false, fmt.Errorf("%w: more than one memory import", ErrMalformed)
			}
			found, memMin = true, mn
			continue // dropped
		case 0x03: // global: valtype, mut
			p += 2
		default:
			return nil, 0, false, fmt.Errorf("%w: import kind %#x", ErrMalformed, kind)
		}
		if p > len(body) {
			return nil, 0, false, fmt.Errorf("%w: import truncated", ErrMalformed)
		}
		kept = append(kept, body[entryStart:p])
	}
	if !found {
		return nil, 0, false, nil
	}
	out := appendU32(nil, uint32(len(kept)))
	for _, k := range kept {
		out = append(out, k...)
	}
	return out, memMin, true, nil
}

func readLimits(b []byte, p int) (uint32, int, error) {
	if p >= len(b) {
		return 0, 0, fmt.Errorf("%w: limits truncated", ErrMalformed)
	}
	flag := b[p]
	mn, n, err := readU32(b, p+1)
	if err != nil {
		return 0, 0, err
	}
	used := 1 + n
	switch flag {
	case 0x00:
	case 0x01:
		_, n2, err := readU32(b, p+used)
		if err != nil {
			return 0, 0, err
		}
		used += n2
	default:
		return 0, 0, fmt.Errorf("%w: unsupported limits flag %#x (shared or 64-bit memory)", ErrMalformed, flag)
	}
	return mn, used, nil
}

func readU32(b []byte, p int) (uint32, int, error) {
	var v uint32
	for i := 0; i < 5; i++ {
		if p+i >= len(b) || p+i < 0 {
			return 0, 0, fmt.Errorf("%w: truncated LEB128", ErrMalformed)
		}
		c := b[p+i]
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: LEB128 too long", ErrMalformed)
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}
