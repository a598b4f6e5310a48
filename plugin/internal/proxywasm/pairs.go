package proxywasm

import (
	"encoding/binary"
	"fmt"
)

// Pairs is a header map in the ABI's encoding, as the host hands it over:
// a little-endian uint32 count N, then N pairs of uint32 (key length, value
// length), then each key and value in order, each followed by a NUL byte.
// A Pairs value returned by ParsePairs has been checked to be well formed.
type Pairs []byte

// ParsePairs checks that b is a well-formed header map and returns it as
// Pairs. An empty b is an empty map.
func ParsePairs(b []byte) (Pairs, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no count", ErrBadPairs, len(b))
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if 4+8*n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: count %d does not fit in %d bytes", ErrBadPairs, n, len(b))
	}
	sizes := b[4 : 4+8*n]
	off := 4 + 8*n
	for i := uint64(0); i < n; i++ {
		kl := uint64(binary.LittleEndian.Uint32(sizes[8*i:]))
		vl := uint64(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		for _, l := range [2]uint64{kl, vl} {
			if off+l+1 > uint64(len(b)) {
				return nil, fmt.Errorf("%w: pair %d runs past the end", ErrBadPairs, i)
			}
			if b[off+l] != 0 {
				return nil, fmt.Errorf("%w: pair %d lacks its NUL terminator", ErrBadPairs, i)
			}
			off += l + 1
		}
	}
	if off != uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadPairs, uint64(len(b))-off)
	}
	return Pairs(b), nil
}

// Len returns the number of pairs.
func (p Pairs) Len() int {
	if len(p) < 4 {
		return 0
	}
	return int(binary.LittleEndian.Uint32(p))
}

// Each calls fn with every key and value, in order, until fn returns false.
// The slices alias p.
func (p Pairs) Each(fn func(key, value []byte) bool) {
	n := p.Len()
	off := 4 + 8*n
	for i := 0; i < n; i++ {
		kl := int(binary.LittleEndian.Uint32(p[4+8*i:]))
		vl := int(binary.LittleEndian.Uint32(p[8+8*i:]))
		k := p[off : off+kl]
		off += kl + 1
		v := p[off : off+vl]
		off += vl + 1
		if !fn(k, v) {
			return
		}
	}
}

// Get returns a copy of the first value of key (compared byte for byte; the
// proxy keeps header names in lower case).
func (p Pairs) Get(key string) (string, bool) {
	var val string
	found := false
	p.Each(func(k, v []byte) bool {
		if string(k) == key {
			val, found = string(v), true
			return false
		}
		return true
	})
	return val, found
}

// EncodePairs encodes pairs in the ABI's header map encoding.
func EncodePairs(pairs [][2]string) []byte {
	size := 4 + 8*len(pairs)
	for _, kv := range pairs {
		size += len(kv[0]) + len(kv[1]) + 2
	}
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b, uint32(len(pairs)))
	off := 4 + 8*len(pairs)
	for i, kv := range pairs {
		binary.LittleEndian.PutUint32(b[4+8*i:], uint32(len(kv[0])))
		binary.LittleEndian.PutUint32(b[8+8*i:], uint32(len(kv[1])))
		off += copy(b[off:], kv[0]) + 1
		off += copy(b[off:], kv[1]) + 1
	}
	return b
}
