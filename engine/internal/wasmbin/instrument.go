package wasmbin

import "fmt"

// instrumentCode inserts, after every loop header of every function body,
// "global.get flag; if; unreachable; end", and gives the functions in
// replace (by defined function position) their new bodies.
func instrumentCode(body []byte, flag uint32, replace map[uint32][]byte) ([]byte, error) {
	count, _, err := readU32(body, 0)
	if err != nil {
		return nil, err
	}
	check := loopCheck(flag)
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

// loopCheck is "global.get flag; if; unreachable; end".
func loopCheck(flag uint32) []byte {
	return append(appendU32([]byte{0x23}, flag), 0x04, 0x40, 0x00, 0x0b)
}

// instrumentFunc copies one function body, inserting check after every
// loop header.
func instrumentFunc(fn []byte, check []byte) ([]byte, error) {
	p, err := skipLocals(fn)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(fn)+64)
	out = append(out, fn[:p]...)
	last := p // start of the not yet copied part
	for p < len(fn) {
		op := fn[p]
		p++
		if op == 0x03 { // loop blocktype
			if p, err = skipBlockType(fn, p); err != nil {
				return nil, err
			}
			out = append(out, fn[last:p]...)
			out = append(out, check...)
			last = p
		} else if p, err = skipImmediates(fn, p, op); err != nil {
			return nil, err
		}
		if p > len(fn) {
			return nil, fmt.Errorf("%w: instruction overruns body", ErrMalformed)
		}
	}
	return append(out, fn[last:]...), nil
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
