package wasmbin

import "fmt"

// instrumentCode inserts check (loopCheck) after the header of every loop
// that calls a function or holds another loop (instrumentFunc), and gives
// the functions in replace (by defined function position) their new
// bodies.
func instrumentCode(body []byte, check []byte, replace map[uint32][]byte) ([]byte, error) {
	count, _, err := readU32(body, 0)
	if err != nil {
		return nil, err
	}
	out := appendU32(make([]byte, 0, len(body)+len(body)/8), count)
	err = eachBody(body, func(i uint32, fn []byte) error {
		r, ok := replace[i]
		if !ok {
			var err error
			if r, err = instrumentFunc(fn, check); err != nil {
				return err
			}
		}
		out = appendU32(out, uint32(len(r)))
		out = append(out, r...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// loopCheck counts one iteration down from the budget in global flag and,
// when the budget is spent (0 or less), asks the host whether to stop:
//
//	global.get flag; i32.const 1; i32.sub; global.set flag
//	global.get flag; i32.const 0; i32.le_s
//	if
//	  i32.const YieldID; i32.const 0; call builtin0
//	  if unreachable end
//	end
func loopCheck(flag, builtin0 uint32) []byte {
	b := appendU32([]byte{0x23}, flag)
	b = append(b, 0x41, 0x01, 0x6b, 0x24)
	b = appendU32(b, flag)
	b = append(b, 0x23)
	b = appendU32(b, flag)
	b = append(b, 0x41, 0x00, 0x4c, 0x04, 0x40, 0x41, 0x7f, 0x41, 0x00, 0x10)
	b = appendU32(b, builtin0)
	return append(b, 0x04, 0x40, 0x00, 0x0b, 0x0b)
}

// instrumentFunc copies one function body, inserting check after the
// header of every loop that calls a function or holds another loop
// (checkedLoops). An innermost loop without calls is left alone: it makes
// one pass over a value in memory (a string's hash, a comparison, a
// copy) and ends within the time that pass takes, after which the loop
// around it, or the caller's, checks again; the checks in such loops were
// a tenth of the time of a policy that looks up a few object keys.
func instrumentFunc(fn []byte, check []byte) ([]byte, error) {
	p, err := skipLocals(fn)
	if err != nil {
		return nil, err
	}
	checked, err := checkedLoops(fn, p)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(fn)+64)
	out = append(out, fn[:p]...)
	last := p // start of the not yet copied part
	loops := 0
	for p < len(fn) {
		op := fn[p]
		p++
		if p, err = skipImmediates(fn, p, op); err != nil {
			return nil, err
		}
		if op == 0x03 {
			if checked[loops] {
				out = append(out, fn[last:p]...)
				out = append(out, check...)
				last = p
			}
			loops++
		}
		if p > len(fn) {
			return nil, fmt.Errorf("%w: instruction overruns body", ErrMalformed)
		}
	}
	return append(out, fn[last:]...), nil
}

// checkedLoops reports, for each loop of the function body whose
// instructions start at p, in order, whether it gets the interrupt check:
// whether a call (of any kind) or another loop is inside it.
func checkedLoops(fn []byte, p int) ([]bool, error) {
	var checked []bool
	var open []int // the loop index of each open block, -1 for a block or if
	var err error
	for p < len(fn) {
		op := fn[p]
		p++
		switch op {
		case 0x02, 0x04: // block, if
			open = append(open, -1)
		case 0x03: // loop
			markOpenLoops(checked, open)
			open = append(open, len(checked))
			checked = append(checked, false)
		case 0x0b: // end (the function's own has nothing open)
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		case 0x10, 0x11, 0x12, 0x13: // call, call_indirect, return_call(_indirect)
			markOpenLoops(checked, open)
		}
		if p, err = skipImmediates(fn, p, op); err != nil {
			return nil, err
		}
	}
	return checked, nil
}

// markOpenLoops marks every loop in open as checked.
func markOpenLoops(checked []bool, open []int) {
	for _, l := range open {
		if l >= 0 {
			checked[l] = true
		}
	}
}

// skipImmediates returns the position after the immediates of op, whose
// opcode ends at p; instructions outside the set OPA's compiler emits are
// ErrMalformed.
func skipImmediates(fn []byte, p int, op byte) (int, error) {
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
		return skipBlockType(fn, p)
	case op == 0x0c || op == 0x0d || op == 0x10 || (op >= 0x20 && op <= 0x26) || op == 0xd2 || op == 0x12:
		return skipLEB(fn, p, 5)
	case op == 0x0e: // br_table
		c, n, err := readU32(fn, p)
		if err != nil {
			return 0, err
		}
		p += n
		for j := uint64(0); j <= uint64(c); j++ {
			if p, err = skipLEB(fn, p, 5); err != nil {
				return 0, err
			}
		}
		return p, nil
	case op == 0x11 || op == 0x13: // call_indirect, return_call_indirect: type, table
		return skipLEBs(fn, p, 2)
	case op == 0x1c: // select t*
		c, n, err := readU32(fn, p)
		if err != nil {
			return 0, err
		}
		return p + n + int(c), nil
	case op >= 0x28 && op <= 0x3e: // memarg
		return skipLEBs(fn, p, 2)
	case op == 0x3f || op == 0x40: // memory.size, memory.grow
		return p + 1, nil
	case op == 0x41:
		return skipLEB(fn, p, 5)
	case op == 0x42:
		return skipLEB(fn, p, 10)
	case op == 0x43:
		return p + 4, nil
	case op == 0x44:
		return p + 8, nil
	case op == 0xd0: // ref.null t
		return p + 1, nil
	case op == 0xfc:
		return skipFC(fn, p)
	case op <= 0x01 || op == 0x05 || op == 0x0b || op == 0x0f || op == 0x1a || op == 0x1b || (op >= 0x45 && op <= 0xc4) || op == 0xd1:
		return p, nil // no immediates
	}
	return 0, fmt.Errorf("%w: unsupported instruction %#x", ErrMalformed, op)
}

// skipFC skips the sub-opcode and immediates of a 0xfc-prefixed
// instruction (saturating truncation, bulk memory, tables).
func skipFC(fn []byte, p int) (int, error) {
	sub, n, err := readU32(fn, p)
	if err != nil {
		return 0, err
	}
	p += n
	switch {
	case sub <= 7:
		return p, nil
	case sub == 8: // memory.init data, mem
		p, err = skipLEB(fn, p, 5)
		return p + 1, err
	case sub == 9, sub == 13, sub == 15, sub == 16, sub == 17:
		return skipLEB(fn, p, 5)
	case sub == 10: // memory.copy
		return p + 2, nil
	case sub == 11: // memory.fill
		return p + 1, nil
	case sub == 12, sub == 14:
		return skipLEBs(fn, p, 2)
	}
	return 0, fmt.Errorf("%w: unsupported instruction 0xfc %d", ErrMalformed, sub)
}

// skipLEBs skips n LEB128 numbers of at most 5 bytes.
func skipLEBs(b []byte, p, n int) (int, error) {
	var err error
	for range n {
		if p, err = skipLEB(b, p, 5); err != nil {
			return 0, err
		}
	}
	return p, nil
}

// skipBlockType skips a blocktype: 0x40, a value type, or an s33 type index.
func skipBlockType(b []byte, p int) (int, error) {
	if p >= len(b) {
		return 0, fmt.Errorf("%w: truncated blocktype", ErrMalformed)
	}
	c := b[p]
	if c == 0x40 || (c >= 0x6f && c <= 0x7f) {
		return p + 1, nil
	}
	return skipLEB(b, p, 5)
}
