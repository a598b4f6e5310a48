// Package wasmbin rewrites OPA policy modules for the engine:
//
//   - the memory the policy imports from "env" becomes a memory the module
//     defines itself, bounded by the engine's page limit, so that one
//     compiled module can be instantiated many times in one wazero runtime;
//   - an exported mutable i32 global, InterruptGlobal, is added: a budget
//     of loop iterations that every loop holding a call or another loop
//     counts down (instrument.go); when it runs out, the loop calls the
//     host through the module's own import env.opa_builtin0 with the
//     builtin id YieldID, and traps if the host answers 1. The host sets
//     the budget to 0 to stop a runaway evaluation, which needs no
//     goroutine per call (wazero's WithCloseOnContextDone), and the call
//     lets the Go runtime stop the world for the garbage collector while
//     a long evaluation runs, which compiled Wasm never lets it do;
//   - the runtime's memo of rule values (opa_memoize_init, _insert and
//     _get) becomes a table indexed by the rule function, in a second added
//     global, for a policy without `with` (memo.go).
//
// Only the instruction set OPA's compiler emits (WebAssembly MVP, sign
// extension, saturating truncation, bulk memory and reference types) is
// understood; other modules are rejected with ErrMalformed.
package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
)

// ErrMalformed reports a module that is not well-formed WebAssembly or does
// not have the shape of an OPA policy module.
var ErrMalformed = errors.New("wasmbin: malformed module")

// InterruptGlobal is the name under which the loop budget is exported.
const InterruptGlobal = "nexus_interrupt"

// YieldID is the builtin id the loops pass to env.opa_builtin0 when their
// budget runs out (i32.const -1): no builtin of OPA's has it.
const YieldID = 0xffffffff

// InitialBudget is the loop budget a module starts with.
const InitialBudget = 64

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

const (
	secCustom = 0
	secImport = 2
	secMemory = 5
	secGlobal = 6
	secExport = 7
	secCode   = 10
)

// rank is the position of each known section in the binary format.
var rank = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

type section struct {
	id   byte
	body []byte
}

// zeroGlobal is the definition of the address of the rewritten memo's
// table: a mutable i32 initialised by i32.const 0. budgetGlobal is the
// loop budget's, initialised to InitialBudget.
var (
	zeroGlobal   = []byte{0x7f, 0x01, 0x41, 0x00, 0x0b}
	budgetGlobal = append(appendS32([]byte{0x7f, 0x01, 0x41}, InitialBudget), 0x0b)
)

// Rewrite returns the rewritten module (see the package doc).
func Rewrite(mod []byte, maxPages uint32) (_ []byte, err error) {
	defer func() {
		if r := recover(); r != nil { // index errors on hostile input
			err = fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	if len(mod) < 8 || !bytes.Equal(mod[:8], header) {
		return nil, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	secs, seen, err := readSections(mod)
	if err != nil {
		return nil, err
	}
	if seen[secMemory] {
		return nil, fmt.Errorf("%w: module defines its own memory", ErrMalformed)
	}
	im, err := dropMemoryImportOf(secs)
	if err != nil {
		return nil, err
	}
	memMin, flag, importedFuncs := im.memMin, im.flag, im.funcs
	if !im.hasBuiltin0 {
		return nil, fmt.Errorf("%w: no import env.opa_builtin0", ErrMalformed)
	}
	if maxPages != 0 && memMin > maxPages {
		return nil, fmt.Errorf("%w: module needs %d memory pages, limit is %d", ErrMalformed, memMin, maxPages)
	}
	globals := [][]byte{budgetGlobal}
	var replace map[uint32][]byte
	if plan, ok := planMemo(secs, importedFuncs, flag+1); ok {
		globals = append(globals, zeroGlobal)
		replace = plan.bodies(importedFuncs)
	}

	// Sections the module lacks, in the order of the binary format.
	pending := []section{{secMemory, memorySection(memMin, maxPages)}}
	if !seen[secGlobal] {
		vec, err := appendToVec(appendU32(nil, 0), globals...)
		if err != nil {
			return nil, err
		}
		pending = append(pending, section{secGlobal, vec})
	}
	if !seen[secExport] {
		pending = append(pending, section{secExport, appendU32(nil, 0)})
	}
	w := writer{
		out:           append(make([]byte, 0, len(mod)+len(mod)/16+64), header...),
		flag:          flag,
		builtin0:      im.builtin0,
		extendGlobals: seen[secGlobal],
		globals:       globals,
		replace:       replace,
	}
	for _, s := range secs {
		if s.id != secCustom {
			for len(pending) > 0 && rank[pending[0].id] < rank[s.id] {
				if err := w.emit(pending[0]); err != nil {
					return nil, err
				}
				pending = pending[1:]
			}
		}
		if err := w.emit(s); err != nil {
			return nil, err
		}
	}
	for _, s := range pending {
		if err := w.emit(s); err != nil {
			return nil, err
		}
	}
	return w.out, nil
}

// readSections splits the module after its header into sections and
// reports which known sections it has; custom sections may repeat, known
// ones may not.
func readSections(mod []byte) ([]section, map[byte]bool, error) {
	var secs []section
	seen := map[byte]bool{}
	for p := 8; p < len(mod); {
		id := mod[p]
		size, n, err := readU32(mod, p+1)
		if err != nil {
			return nil, nil, err
		}
		start := p + 1 + n
		end := start + int(size)
		if end > len(mod) || end < start {
			return nil, nil, fmt.Errorf("%w: section %d overruns module", ErrMalformed, id)
		}
		if id != secCustom {
			if _, ok := rank[id]; !ok {
				return nil, nil, fmt.Errorf("%w: unknown section %d", ErrMalformed, id)
			}
			if seen[id] {
				return nil, nil, fmt.Errorf("%w: duplicate section %d", ErrMalformed, id)
			}
			seen[id] = true
		}
		secs = append(secs, section{id, mod[start:end]})
		p = end
	}
	return secs, seen, nil
}

// imports is what dropMemoryImportOf found in the import section.
type imports struct {
	memMin      uint32 // the memory's minimum pages
	globals     uint32 // imported globals
	flag        uint32 // the index the loop budget gets: after every imported and defined global
	funcs       uint32 // imported functions
	builtin0    uint32 // the function index of env.opa_builtin0, if hasBuiltin0
	hasBuiltin0 bool
}

// dropMemoryImportOf removes the memory import from the import section in
// secs and reports what the module imports.
func dropMemoryImportOf(secs []section) (imports, error) {
	var im imports
	var definedGlobals uint32
	foundMem := false
	for i, s := range secs {
		switch s.id {
		case secImport:
			body, ii, ok, err := dropMemoryImport(s.body)
			if err != nil {
				return im, err
			}
			secs[i].body, im, foundMem = body, ii, ok
		case secGlobal:
			c, _, err := readU32(s.body, 0)
			if err != nil {
				return im, err
			}
			definedGlobals = c
		}
	}
	if !foundMem {
		return im, fmt.Errorf("%w: no imported memory", ErrMalformed)
	}
	im.flag = im.globals + definedGlobals
	return im, nil
}

// memorySection is the body of a memory section defining one memory of
// memMin pages, bounded by maxPages unless it is 0.
func memorySection(memMin, maxPages uint32) []byte {
	b := appendU32(nil, 1)
	if maxPages == 0 {
		b = append(b, 0x00)
		return appendU32(b, memMin)
	}
	b = append(b, 0x01)
	b = appendU32(b, memMin)
	return appendU32(b, maxPages)
}

// writer writes the rewritten module's sections.
type writer struct {
	out           []byte
	flag          uint32            // global index of the loop budget
	builtin0      uint32            // function index of env.opa_builtin0
	extendGlobals bool              // the module has a global section: add globals to it
	globals       [][]byte          // the globals to add: the budget, maybe the memo's table
	replace       map[uint32][]byte // new bodies by position in the code section (the memo's)
}

// emit writes s, with the loop budget added to the global and export
// sections and the loop checks to the code section.
func (w *writer) emit(s section) error {
	body := s.body
	var err error
	switch s.id {
	case secGlobal:
		if w.extendGlobals {
			body, err = appendToVec(body, w.globals...)
		}
	case secExport:
		e := appendName(nil, InterruptGlobal)
		e = append(e, 0x03)
		e = appendU32(e, w.flag)
		body, err = appendToVec(body, e)
	case secCode:
		body, err = instrumentCode(body, loopCheck(w.flag, w.builtin0), w.replace)
	}
	if err != nil {
		return err
	}
	w.out = append(w.out, s.id)
	w.out = appendU32(w.out, uint32(len(body)))
	w.out = append(w.out, body...)
	return nil
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

// appendToVec adds (already encoded) entries to a vector body.
func appendToVec(body []byte, entries ...[]byte) ([]byte, error) {
	c, n, err := readU32(body, 0)
	if err != nil {
		return nil, err
	}
	out := appendU32(nil, c+uint32(len(entries)))
	out = append(out, body[n:]...)
	for _, e := range entries {
		out = append(out, e...)
	}
	return out, nil
}

// dropMemoryImport removes the memory import from an import section body,
// counts the imported globals and functions, and finds env.opa_builtin0.
func dropMemoryImport(body []byte) (_ []byte, im imports, found bool, _ error) {
	count, n, err := readU32(body, 0)
	if err != nil {
		return nil, im, false, err
	}
	p := n
	var kept [][]byte
	for i := uint32(0); i < count; i++ {
		entryStart := p
		var names [2][]byte
		for j := range names { // module name, field name
			l, n, err := readU32(body, p)
			if err != nil {
				return nil, im, false, err
			}
			p += n + int(l)
			if p > len(body) || p < 0 {
				return nil, im, false, fmt.Errorf("%w: import name overruns section", ErrMalformed)
			}
			names[j] = body[p-int(l) : p]
		}
		if p >= len(body) {
			return nil, im, false, fmt.Errorf("%w: import truncated", ErrMalformed)
		}
		kind := body[p]
		p++
		switch kind {
		case 0x00: // function: type index
			_, n, err := readU32(body, p)
			if err != nil {
				return nil, im, false, err
			}
			p += n
			if string(names[0]) == "env" && string(names[1]) == "opa_builtin0" {
				im.builtin0, im.hasBuiltin0 = im.funcs, true
			}
			im.funcs++
		case 0x01: // table: reftype, limits
			p++
			_, n, err := readLimits(body, p)
			if err != nil {
				return nil, im, false, err
			}
			p += n
		case 0x02: // memory: limits
			mn, n, err := readLimits(body, p)
			if err != nil {
				return nil, im, false, err
			}
			p += n
			if found {
				return nil, im, false, fmt.Errorf("%w: more than one memory import", ErrMalformed)
			}
			found, im.memMin = true, mn
			continue // dropped
		case 0x03: // global: valtype, mut
			p += 2
			im.globals++
		default:
			return nil, im, false, fmt.Errorf("%w: import kind %#x", ErrMalformed, kind)
		}
		if p > len(body) {
			return nil, im, false, fmt.Errorf("%w: import truncated", ErrMalformed)
		}
		kept = append(kept, body[entryStart:p])
	}
	out := appendU32(nil, uint32(len(kept)))
	for _, k := range kept {
		out = append(out, k...)
	}
	return out, im, found, nil
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

// skipLEB skips one LEB128 number of at most max bytes.
func skipLEB(b []byte, p, maxBytes int) (int, error) {
	for i := 0; i < maxBytes; i++ {
		if p+i >= len(b) {
			return 0, fmt.Errorf("%w: truncated LEB128", ErrMalformed)
		}
		if b[p+i]&0x80 == 0 {
			return p + i + 1, nil
		}
	}
	return 0, fmt.Errorf("%w: LEB128 too long", ErrMalformed)
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
