package engine

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
	"sort"
	"strconv"
)

// This file writes values straight into a module's linear memory in the
// layout of OPA's Wasm runtime (OPA v1 wasm/src/value.h, malloc.c), so
// that neither input nor builtin results go through JSON text and the
// runtime's parser.
//
// Layout (wasm32, little endian; size_t and pointers are 4 bytes):
//
//	boolean  {u8 type; u8 v}                                   2 bytes
//	number   {u8 type; u8 repr; pad; union @8 {i64 i | {ptr s; u32 len; u8 free}}} 24
//	string   {u8 type; u8 free; pad; u32 len @4; ptr v @8}   12
//	array    {u8 type; ptr elems @4; u32 len @8; u32 cap @12} 16, elems {ptr i; ptr v}
//	object   {u8 type; ptr buckets @4; u32 n @8; u32 len @12} 16, elem {ptr k; ptr v; ptr next}
//	set      {u8 type; ptr buckets @4; u32 n @8; u32 len @12} 16, elem {ptr v; ptr next}
//
// Every allocation is laid out as opa_malloc lays out a fresh block: a
// 12-byte header {size; prev=0; next=0} before the data, sizes of 64 bytes
// or less rounded up to the block classes 4, 8, 16 and 64. A block the
// runtime frees (opa_free) is then a valid block of its heap.
//
// Objects and sets are the runtime's hash tables: the hash is the
// runtime's opa_value_hash (FNV-1a for strings, of the double for
// numbers, sums for collections), computed only for what is placed in a
// bucket (an object's key, a set's element): values are not hashed
// when written, as most (an input document's strings) are never keys.
// There are as many buckets as the
// runtime's growth rule leaves for that many entries (8, doubled while
// the length exceeds 0.7 of them), and each bucket's list is sorted by
// opa_value_compare, as the runtime's insert keeps it. So lookups inside
// the module find every key, and iteration visits entries in the order
// the runtime's own parser would have left them.

const (
	blockHeader = 12

	sizeBoolean = 2
	sizeNumber  = 24
	sizeString  = 12
	sizeArray   = 16
	sizeHashed  = 16 // object and set
	sizeObjElem = 12
	sizeSetElem = 8
	sizeCtx     = 16 // opa_eval_ctx_t {input; data; result; entrypoint}

	minBuckets = 8
)

// blockSize is the size opa_malloc gives a request of n bytes.
func blockSize(n uint32) uint32 {
	switch {
	case n <= 4:
		return 4
	case n <= 8:
		return 8
	case n <= 16:
		return 16
	case n <= 64:
		return 64
	}
	return n
}

// bucketsFor is the bucket count the runtime's object and set reach after
// n inserts: 8, doubled whenever an insert would exceed a load of 0.7.
func bucketsFor(n int) uint32 {
	b := uint32(minBuckets)
	for float64(n) > float64(b)*0.7 {
		b *= 2
	}
	return b
}

// entry is a value written (or being written) in the arena: its address
// (relative to the arena's start).
type entry struct {
	addr uint32
}

// arena builds values in a Go buffer that is later copied into the
// module's memory at base. Addresses are written relative to the arena
// and fixed up by relocate; marks has a bit for every offset that holds a
// pointer field (null or not). The buffer's capacity past its length is
// always zero, so that alloc need not clear each block: reset clears what
// was used in one go.
type arena struct {
	b     []byte
	marks []uint64
	base  uint32 // where the pointers point: 0 until relocated
}

func (a *arena) reset() {
	clear(a.b)
	a.b = a.b[:0]
	clear(a.marks)
	a.marks = a.marks[:0]
	a.base = 0
}

// alloc reserves a block of n bytes, zeroed, and returns the address of
// its data.
func (a *arena) alloc(n uint32) uint32 {
	bs := blockSize(n)
	off := uint32(len(a.b))
	need := int(off) + blockHeader + int(bs)
	if cap(a.b) < need {
		nb := make([]byte, len(a.b), max(need, 2*cap(a.b), 256))
		copy(nb, a.b)
		a.b = nb
	}
	a.b = a.b[:need] // zero past the old length
	for len(a.marks)*64 < need {
		a.marks = append(a.marks, 0)
	}
	binary.LittleEndian.PutUint32(a.b[off:], bs)
	return off + blockHeader
}

func (a *arena) u32(at, v uint32) { binary.LittleEndian.PutUint32(a.b[at:], v) }

// ptr writes a pointer field.
func (a *arena) ptr(at, v uint32) {
	binary.LittleEndian.PutUint32(a.b[at:], v)
	a.marks[at/64] |= 1 << (at % 64)
}

func (a *arena) get32(at uint32) uint32 { return binary.LittleEndian.Uint32(a.b[at:]) }

// relocate turns arena addresses into memory addresses for an arena
// copied to base (from those for the base it was relocated to before).
func (a *arena) relocate(base uint32) {
	delta := base - a.base
	a.base = base
	if delta == 0 {
		return
	}
	for w, word := range a.marks {
		for word != 0 {
			i := uint32(bits.TrailingZeros64(word))
			word &= word - 1
			at := uint32(w)*64 + i
			if v := a.get32(at); v != 0 {
				a.u32(at, v+delta)
			}
		}
	}
}

// FNV-1a, as the runtime's fnv1a32 over size_t (32 bits).
const fnvInit uint32 = 0x811c9dc5

func fnv1aBytes(h uint32, s []byte) uint32 {
	for _, c := range s {
		h *= 0x01000193
		h ^= uint32(c)
	}
	return h
}

func hashFloat(d float64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(d))
	return fnv1aBytes(fnvInit, b[:])
}

func (a *arena) null() entry {
	p := a.alloc(1)
	a.b[p] = opaNull
	return entry{p}
}

func (a *arena) boolean(v bool) entry {
	p := a.alloc(sizeBoolean)
	a.b[p] = opaBoolean
	if v {
		a.b[p+1] = 1
	}
	return entry{p}
}

func (a *arena) integer(i int64) entry {
	p := a.alloc(sizeNumber)
	a.b[p] = opaNumber
	a.b[p+1] = numberReprInt
	binary.LittleEndian.PutUint64(a.b[p+8:], uint64(i))
	return entry{p}
}

// number writes the JSON number text s as the runtime's parser does: a
// reference to an allocated copy of the text.
func (a *arena) number(s string) entry {
	p := a.alloc(sizeNumber)
	t := a.alloc(uint32(len(s)))
	copy(a.b[t:], s)
	a.b[p] = opaNumber
	a.b[p+1] = numberReprRef
	a.ptr(p+8, t)
	a.u32(p+12, uint32(len(s)))
	a.b[p+16] = 1 // free
	return entry{p}
}

// stringBytes writes a string value whose n bytes are filled in by the
// caller at the returned data offset.
func (a *arena) stringBytes(n int) (entry, uint32) {
	p := a.alloc(sizeString)
	t := a.alloc(uint32(n))
	a.b[p] = opaString
	a.b[p+1] = 1 // free
	a.u32(p+4, uint32(n))
	a.ptr(p+8, t)
	return entry{p}, t
}

func (a *arena) str(s string) entry {
	e, t := a.stringBytes(len(s))
	copy(a.b[t:], s)
	return e
}

// array writes an array of the given elements, each with its index as a
// number, as opa_array_append does.
func (a *arena) array(elems []entry) entry {
	p := a.alloc(sizeArray)
	a.b[p] = opaArray
	if len(elems) > 0 {
		es := a.alloc(uint32(8 * len(elems)))
		a.ptr(p+4, es)
		for i, e := range elems {
			idx := a.integer(int64(i))
			a.ptr(es+uint32(8*i), idx.addr)
			a.ptr(es+uint32(8*i)+4, e.addr)
		}
	}
	a.u32(p+8, uint32(len(elems)))
	a.u32(p+12, uint32(len(elems)))
	return entry{p}
}

// object writes an object of key/value pairs (kv alternates key, value).
// A key given twice keeps the last value, as the runtime's insert does.
func (a *arena) object(kv []entry) entry {
	p := a.alloc(sizeHashed)
	a.b[p] = opaObject
	n := len(kv) / 2
	nb := bucketsFor(n)
	bk := a.alloc(4 * nb)
	a.ptr(p+4, bk)
	a.u32(p+8, nb)
	count := uint32(0)
	for i := 0; i < n; i++ {
		k, v := kv[2*i], kv[2*i+1]
		head := bk + 4*(a.hashOf(k.addr)%nb)
		// Walk the sorted list: replace a duplicate key, else insert
		// before the first greater key.
		prev := head
		cur := a.get32(head)
		dup := false
		for cur != 0 {
			c := a.compare(k.addr, a.get32(cur))
			if c == 0 {
				dup = true
				break
			}
			if c < 0 {
				break
			}
			prev = cur + 8
			cur = a.get32(cur + 8)
		}
		if dup {
			a.ptr(cur+4, v.addr)
			continue
		}
		el := a.alloc(sizeObjElem)
		a.ptr(el, k.addr)
		a.ptr(el+4, v.addr)
		a.ptr(el+8, cur)
		a.ptr(prev, el)
		count++
	}
	a.u32(p+12, count)
	if want := bucketsFor(int(count)); want != nb {
		a.rebucket(p, 8, want) // duplicate keys: the runtime grew less
	}
	return entry{p}
}

// rebucket moves the entries of the object or set at p (next links at
// offset next in an entry) into nb buckets, as the runtime's table would
// have them had it grown only for the distinct entries.
func (a *arena) rebucket(p, next, nb uint32) {
	old, on := a.get32(p+4), a.get32(p+8)
	var elems []uint32
	for b := uint32(0); b < on; b++ {
		for e := a.get32(old + 4*b); e != 0; e = a.get32(e + next) {
			elems = append(elems, e)
		}
	}
	bk := a.alloc(4 * nb)
	a.ptr(p+4, bk)
	a.u32(p+8, nb)
	for _, el := range elems {
		k := a.get32(el)
		prev := bk + 4*(a.hashOf(k)%nb)
		cur := a.get32(prev)
		for cur != 0 && a.compare(k, a.get32(cur)) > 0 {
			prev = cur + next
			cur = a.get32(cur + next)
		}
		a.ptr(el+next, cur)
		a.ptr(prev, el)
	}
}

// set writes a set of the given elements, dropping duplicates.
func (a *arena) set(elems []entry) entry {
	p := a.alloc(sizeHashed)
	a.b[p] = opaSet
	nb := bucketsFor(len(elems))
	bk := a.alloc(4 * nb)
	a.ptr(p+4, bk)
	a.u32(p+8, nb)
	count := uint32(0)
	for _, e := range elems {
		head := bk + 4*(a.hashOf(e.addr)%nb)
		prev := head
		cur := a.get32(head)
		dup := false
		for cur != 0 {
			c := a.compare(e.addr, a.get32(cur))
			if c == 0 {
				dup = true
				break
			}
			if c < 0 {
				break
			}
			prev = cur + 4
			cur = a.get32(cur + 4)
		}
		if dup {
			continue
		}
		el := a.alloc(sizeSetElem)
		a.ptr(el, e.addr)
		a.ptr(el+4, cur)
		a.ptr(prev, el)
		count++
	}
	a.u32(p+12, count)
	if want := bucketsFor(int(count)); want != nb {
		a.rebucket(p, 4, want) // duplicate elements: the runtime grew less
	}
	return entry{p}
}

// hashOf recomputes opa_value_hash of the arena value at p.
func (a *arena) hashOf(p uint32) uint32 {
	return valueHash(a.b, p)
}

// compare is opa_value_compare of two arena values.
func (a *arena) compare(x, y uint32) int { return valueCompare(a.b, x, y) }

// valueType is opa_value_type: interned strings and booleans are strings
// and booleans.
func valueType(m []byte, p uint32) byte {
	switch t := m[p]; t {
	case opaStringInterned:
		return opaString
	case opaBooleanInterned:
		return opaBoolean
	default:
		return t
	}
}

func le32(m []byte, p uint32) uint32 { return binary.LittleEndian.Uint32(m[p:]) }

// stringAt returns the bytes of the string value at p.
func stringAt(m []byte, p uint32) []byte {
	n, s := le32(m, p+4), le32(m, p+8)
	if n == 0 {
		return nil
	}
	return m[s : s+n]
}

// numberText returns the number at p as text and whether it is an int.
func numberAt(m []byte, p uint32) (i int64, text []byte, isInt bool) {
	if m[p+1] == numberReprInt {
		return int64(binary.LittleEndian.Uint64(m[p+8:])), nil, true
	}
	n := le32(m, p+12)
	return 0, m[le32(m, p+8) : le32(m, p+8)+n], false
}

func numberFloat(m []byte, p uint32) float64 {
	i, t, isInt := numberAt(m, p)
	if isInt {
		return float64(i)
	}
	return atof64(string(t))
}

// valueHash is opa_value_hash over memory m (arena or module memory).
func valueHash(m []byte, p uint32) uint32 {
	switch valueType(m, p) {
	case opaBoolean:
		if m[p+1] != 0 {
			return 0
		}
		return 1
	case opaNumber:
		return hashFloat(numberFloat(m, p))
	case opaString:
		return fnv1aBytes(fnvInit, stringAt(m, p))
	case opaArray:
		var h uint32
		es, n := le32(m, p+4), le32(m, p+8)
		for i := uint32(0); i < n; i++ {
			h += valueHash(m, le32(m, es+8*i+4))
		}
		return h
	case opaObject:
		var h uint32
		walkObject(m, p, func(k, v uint32) {
			h += valueHash(m, k) + valueHash(m, v)
		})
		return h
	case opaSet:
		var h uint32
		walkSet(m, p, func(v uint32) { h += valueHash(m, v) })
		return h
	}
	return 0
}

// walkObject visits an object's entries in the runtime's iteration order.
func walkObject(m []byte, p uint32, f func(k, v uint32)) {
	bk, n := le32(m, p+4), le32(m, p+8)
	for b := uint32(0); b < n; b++ {
		for e := le32(m, bk+4*b); e != 0; e = le32(m, e+8) {
			f(le32(m, e), le32(m, e+4))
		}
	}
}

// walkSet visits a set's elements in the runtime's iteration order.
func walkSet(m []byte, p uint32, f func(v uint32)) {
	bk, n := le32(m, p+4), le32(m, p+8)
	for b := uint32(0); b < n; b++ {
		for e := le32(m, bk+4*b); e != 0; e = le32(m, e+4) {
			f(le32(m, e))
		}
	}
}

// valueCompare is opa_value_compare: by type, then by value; numbers
// exactly, strings bytewise, collections element by element (objects by
// sorted keys, sets by sorted elements).
func valueCompare(m []byte, x, y uint32) int {
	if x == y {
		return 0
	}
	tx, ty := valueType(m, x), valueType(m, y)
	if tx != ty {
		if tx < ty {
			return -1
		}
		return 1
	}
	switch tx {
	case opaNull:
		return 0
	case opaBoolean:
		return int(m[x+1]) - int(m[y+1])
	case opaNumber:
		return compareNumbers(m, x, y)
	case opaString:
		return compareBytes(stringAt(m, x), stringAt(m, y))
	case opaArray:
		ex, nx := le32(m, x+4), le32(m, x+8)
		ey, ny := le32(m, y+4), le32(m, y+8)
		for i := uint32(0); i < min(nx, ny); i++ {
			if c := valueCompare(m, le32(m, ex+8*i+4), le32(m, ey+8*i+4)); c != 0 {
				return c
			}
		}
		return cmpLen(nx, ny)
	case opaObject:
		kx, ky := sortedKeys(m, x), sortedKeys(m, y)
		for i := 0; i < min(len(kx), len(ky)); i++ {
			if c := valueCompare(m, kx[i][0], ky[i][0]); c != 0 {
				return c
			}
			if c := valueCompare(m, kx[i][1], ky[i][1]); c != 0 {
				return c
			}
		}
		return cmpLen(uint32(len(kx)), uint32(len(ky)))
	case opaSet:
		vx, vy := sortedElems(m, x), sortedElems(m, y)
		for i := 0; i < min(len(vx), len(vy)); i++ {
			if c := valueCompare(m, vx[i], vy[i]); c != 0 {
				return c
			}
		}
		return cmpLen(uint32(len(vx)), uint32(len(vy)))
	}
	return 0
}

func cmpLen(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareBytes(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return cmpLen(uint32(len(a)), uint32(len(b)))
}

func sortedKeys(m []byte, p uint32) [][2]uint32 {
	var kv [][2]uint32
	walkObject(m, p, func(k, v uint32) { kv = append(kv, [2]uint32{k, v}) })
	sort.SliceStable(kv, func(i, j int) bool { return valueCompare(m, kv[i][0], kv[j][0]) < 0 })
	return kv
}

func sortedElems(m []byte, p uint32) []uint32 {
	var vs []uint32
	walkSet(m, p, func(v uint32) { vs = append(vs, v) })
	sort.SliceStable(vs, func(i, j int) bool { return valueCompare(m, vs[i], vs[j]) < 0 })
	return vs
}

// compareNumbers compares exactly, as the runtime does (as integers when
// both are, else as decimals).
func compareNumbers(m []byte, x, y uint32) int {
	ix, tx, okx := numberAt(m, x)
	iy, ty, oky := numberAt(m, y)
	if okx && oky {
		switch {
		case ix < iy:
			return -1
		case ix > iy:
			return 1
		}
		return 0
	}
	rx, ry := numberRat(ix, tx, okx), numberRat(iy, ty, oky)
	if rx == nil || ry == nil {
		return compareBytes(tx, ty) // not numbers the runtime could compare either
	}
	return rx.Cmp(ry)
}

func numberRat(i int64, text []byte, isInt bool) *big.Rat {
	if isInt {
		return new(big.Rat).SetInt64(i)
	}
	r, ok := new(big.Rat).SetString(string(text))
	if !ok {
		return nil
	}
	return r
}

// atof64 is the runtime's opa_atof64 (wasm/src/str.c), which is not
// correctly rounded: the hash of a number is that of this double, so it
// must be computed the same way.
func atof64(s string) float64 {
	n := len(s)
	if n == 0 {
		return 0
	}
	sign := 1.0
	i := 0
	if s[i] == '-' {
		sign = -1.0
		i++
	}
	d := 0.0
	for ; i < n && isDigit(s[i]); i++ {
		d = float64(10.0*d) + float64(s[i]-'0') // float64(): no fused multiply-add
	}
	d *= sign
	if i == n {
		return d
	}
	if s[i] == '.' {
		i++
		b := 0.1
		frac := 0.0
		for ; i < n && isDigit(s[i]); i++ {
			frac += float64(b * float64(s[i]-'0'))
			b /= 10.0
		}
		d += float64(frac * sign)
		if i == n {
			return d
		}
	}
	if s[i] == 'e' || s[i] == 'E' {
		i++
		expSign := int32(1)
		if i < n && s[i] == '-' {
			expSign = -1
			i++
		} else if i < n && s[i] == '+' {
			i++
		}
		e := int32(0)
		for ; i < n && isDigit(s[i]); i++ {
			e = 10*e + int32(s[i]-'0')
		}
		if i == n {
			x := int32(1)
			for ; e > 0; e-- {
				x *= 10
			}
			return d * float64(expSign*x)
		}
	}
	// The runtime aborts here (opa_number_as_float: illegal ref); such
	// text is not a JSON number and is never written.
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
