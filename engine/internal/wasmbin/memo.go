package wasmbin

import (
	"bytes"
	"fmt"
	"math"
)

// OPA's runtime keeps the value of every rule an evaluation computes in a
// memo (opa_memoize_*, wasm/src/memoize.c): a hash object keyed by the
// rule function's index. Every rule call looks its index up and every
// rule's end inserts it, each time hashing a number, comparing numbers
// and allocating. The compiler calls the memo only from the prologue and
// the returns of the rule functions it emits, with the function's own
// index as a constant, so the indexes are known from the module: the
// rewrite gives opa_memoize_init, _insert and _get new bodies over a table
// of one slot per rule function, indexed directly, made zeroed in the
// module's heap by init at the start of every evaluation (never freed: the
// engine resets the heap for every evaluation, as the runtime's own memo
// assumes). get answers the value inserted for the index, or 0 (none), as
// the runtime's does.
//
// A policy that uses `with` keeps the runtime's memo: its scopes
// (opa_memoize_push and _pop, which the compiler keeps only then) would
// each need a table of their own. So does a module without the names of
// these functions, and one with more than memoMaxSlots rule functions,
// whose table would cost more to clear than the lookups it saves.
const memoMaxSlots = 1024

// memoPlan says where the memo functions are and which indexes they take.
type memoPlan struct {
	init, insert, get, malloc uint32 // function indexes
	lo, n                     uint32 // the rule functions' indexes are lo..lo+n-1
	global                    uint32 // the global holding the table
}

// planMemo finds the memo functions by the module's name section and the
// range of indexes the rule functions pass, for a table held in the global
// of index global; false keeps the runtime's memo.
func planMemo(secs []section, importedFuncs, global uint32) (*memoPlan, bool) {
	names := functionNames(secs)
	if _, ok := names["opa_memoize_push"]; ok {
		return nil, false
	}
	if _, ok := names["opa_memoize_pop"]; ok {
		return nil, false
	}
	plan := &memoPlan{global: global}
	for name, dst := range map[string]*uint32{"opa_memoize_init": &plan.init, "opa_memoize_insert": &plan.insert, "opa_memoize_get": &plan.get, "opa_malloc": &plan.malloc} {
		idx, ok := names[name]
		if !ok || idx < importedFuncs {
			return nil, false
		}
		*dst = idx
	}
	lo, hi := uint32(math.MaxUint32), uint32(0)
	for _, s := range secs {
		if s.id != secCode {
			continue
		}
		err := eachBody(s.body, func(_ uint32, fn []byte) error {
			if idx, ok := memoPrologue(fn, plan.get); ok {
				lo, hi = min(lo, idx), max(hi, idx)
			}
			return nil
		})
		if err != nil {
			return nil, false
		}
	}
	if lo > hi || hi-lo >= memoMaxSlots { // no rule function, or too many
		return nil, false
	}
	plan.lo, plan.n = lo, hi-lo+1
	return plan, true
}

// memoPrologue reports the constant a function body passes to
// opa_memoize_get (index get) as its first instructions, as the
// compiler's rule functions begin.
func memoPrologue(fn []byte, get uint32) (uint32, bool) {
	p, err := skipLocals(fn)
	if err != nil || p >= len(fn) || fn[p] != 0x41 { // i32.const
		return 0, false
	}
	v, n, err := readS32(fn, p+1)
	if err != nil || v < 0 {
		return 0, false
	}
	p += 1 + n
	if p >= len(fn) || fn[p] != 0x10 { // call
		return 0, false
	}
	callee, _, err := readU32(fn, p+1)
	if err != nil || callee != get {
		return 0, false
	}
	return uint32(v), true
}

// bodies returns the new bodies by position in the code section (function
// index less the imported functions).
func (m *memoPlan) bodies(importedFuncs uint32) map[uint32][]byte {
	i32 := func(b []byte, v uint32) []byte { return appendS32(append(b, 0x41), int32(v)) } // i32.const v
	global := func(op byte) []byte { return appendU32([]byte{op}, m.global) }
	// init: table = opa_malloc(4n); memory.fill(table, 0, 4n)
	init := []byte{0x01, 0x01, 0x7f} // one i32 local
	init = append(i32(init, 4*m.n), 0x10)
	init = appendU32(init, m.malloc)
	init = append(init, 0x22, 0x00)                       // local.tee 0
	init = append(init, global(0x24)...)                  // global.set
	init = append(i32(append(init, 0x20, 0x00), 0), 0x41) // local.get 0; i32.const 0
	init = appendS32(init, int32(4*m.n))
	init = append(init, 0xfc, 0x0b, 0x00, 0x0b) // memory.fill; end
	// slot leaves, under "if index - lo < n", the address of the slot of
	// param 0 in the local s.
	slot := func(s byte, result byte) []byte {
		b := []byte{0x01, 0x01, 0x7f, 0x20, 0x00}         // one i32 local; local.get 0
		b = append(i32(b, m.lo), 0x6b, 0x22, s)           // i32.sub; local.tee s
		b = append(i32(b, m.n), 0x49, 0x04, result)       // i32.lt_u; if
		b = append(b, global(0x23)...)                    // global.get
		return append(b, 0x20, s, 0x41, 0x02, 0x74, 0x6a) // local.get s; i32.const 2; i32.shl; i32.add
	}
	// get(index) -> value (0: none)
	get := append(slot(1, 0x7f), 0x28, 0x02, 0x00, 0x05, 0x41, 0x00, 0x0b, 0x0b) // i32.load; else i32.const 0; end; end
	// insert(index, value)
	insert := append(slot(2, 0x40), 0x20, 0x01, 0x36, 0x02, 0x00, 0x0b, 0x0b) // local.get 1; i32.store; end; end
	return map[uint32][]byte{
		m.init - importedFuncs:   init,
		m.insert - importedFuncs: insert,
		m.get - importedFuncs:    get,
	}
}

// functionNames reads the function names of the module's name section.
func functionNames(secs []section) map[string]uint32 {
	out := map[string]uint32{}
	for _, s := range secs {
		l, n, err := readU32(s.body, 0)
		if s.id != secCustom || err != nil || n+int(l) > len(s.body) || !bytes.Equal(s.body[n:n+int(l)], []byte("name")) {
			continue
		}
		b := s.body[n+int(l):]
		for p := 0; p < len(b); {
			size, n, err := readU32(b, p+1)
			if err != nil || p+1+n+int(size) > len(b) {
				return out
			}
			sub := b[p+1+n : p+1+n+int(size)]
			if b[p] == 1 { // function names: vec of (index, name)
				count, q, err := readU32(sub, 0)
				for i := uint32(0); i < count && err == nil; i++ {
					var idx, l uint32
					if idx, n, err = readU32(sub, q); err == nil {
						q += n
						if l, n, err = readU32(sub, q); err == nil && q+n+int(l) <= len(sub) {
							out[string(sub[q+n:q+n+int(l)])] = idx
							q += n + int(l)
						}
					}
				}
			}
			p += 1 + n + int(size)
		}
	}
	return out
}

// eachBody calls f with the position and body of every function of a code
// section.
func eachBody(code []byte, f func(i uint32, fn []byte) error) error {
	count, p, err := readU32(code, 0)
	if err != nil {
		return err
	}
	for i := uint32(0); i < count; i++ {
		size, n, err := readU32(code, p)
		if err != nil {
			return err
		}
		start := p + n
		end := start + int(size)
		if end > len(code) || end < start {
			return fmt.Errorf("%w: function body overruns code section", ErrMalformed)
		}
		if err := f(i, code[start:end]); err != nil {
			return fmt.Errorf("function %d: %w", i, err)
		}
		p = end
	}
	if p != len(code) {
		return fmt.Errorf("%w: trailing bytes in code section", ErrMalformed)
	}
	return nil
}

// skipLocals returns the position after a function body's locals.
func skipLocals(fn []byte) (int, error) {
	groups, p, err := readU32(fn, 0)
	if err != nil {
		return 0, err
	}
	for i := uint32(0); i < groups; i++ {
		if p, err = skipLEB(fn, p, 5); err != nil {
			return 0, err
		}
		p++ // valtype
	}
	if p > len(fn) {
		return 0, fmt.Errorf("%w: locals overrun body", ErrMalformed)
	}
	return p, nil
}

// readS32 reads a signed LEB128 number of at most 5 bytes.
func readS32(b []byte, p int) (int32, int, error) {
	var v int64
	for i := 0; i < 5; i++ {
		if p+i >= len(b) {
			return 0, 0, fmt.Errorf("%w: truncated LEB128", ErrMalformed)
		}
		c := b[p+i]
		v |= int64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			if c&0x40 != 0 {
				v |= -1 << (7 * (i + 1))
			}
			return int32(v), i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: LEB128 too long", ErrMalformed)
}

// appendS32 appends v as a signed LEB128 number.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
