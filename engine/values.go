package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/nexuspdp/nexus/internal/jsonw"
)

// OPA Wasm value types (OPA's wasm/src/value.h).
const (
	opaNull            = 1
	opaBoolean         = 2
	opaNumber          = 3
	opaString          = 4
	opaArray           = 5
	opaObject          = 6
	opaSet             = 7
	opaStringInterned  = 8
	opaBooleanInterned = 9

	numberReprInt = 1
	numberReprRef = 2
)

var errValueLayout = errors.New("engine: unexpected value layout")

const maxValueDepth = 512

// readTerm converts the OPA value at addr into an AST term by reading the
// value structures in memory (no NUL-terminated dump, so strings holding
// NUL bytes survive).
func (in *instance) readTerm(addr uint32, depth int) (*ast.Term, error) {
	if depth > maxValueDepth {
		return nil, errValueLayout
	}
	h, ok := in.mem.Read(addr, 16)
	if !ok {
		h, ok = in.mem.Read(addr, 8)
		if !ok {
			return nil, errValueLayout
		}
	}
	u32 := func(off int) uint32 { return binary.LittleEndian.Uint32(h[off:]) }
	switch h[0] {
	case opaNull:
		return ast.NullTerm(), nil
	case opaBoolean, opaBooleanInterned:
		return ast.BooleanTerm(h[1] != 0), nil
	case opaString, opaStringInterned:
		s, ok := in.bytesAt(u32(8), u32(4))
		if !ok {
			return nil, errValueLayout
		}
		return ast.StringTerm(string(s)), nil
	case opaNumber:
		switch h[1] {
		case numberReprInt:
			if len(h) < 16 {
				return nil, errValueLayout
			}
			return ast.IntNumberTerm(int(int64(binary.LittleEndian.Uint64(h[8:])))), nil
		case numberReprRef:
			s, ok := in.bytesAt(u32(8), u32(12))
			if !ok {
				return nil, errValueLayout
			}
			return ast.NumberTerm(json.Number(strings.Clone(string(s)))), nil
		}
		return nil, errValueLayout
	case opaArray:
		return in.readArray(u32(4), u32(8), depth)
	case opaObject, opaSet:
		return in.readHashed(h[0] == opaObject, u32(4), u32(8), u32(12), depth)
	}
	return nil, errValueLayout
}

// readArray reads the n elements of an array value at elems.
func (in *instance) readArray(elems, n uint32, depth int) (*ast.Term, error) {
	if n > in.mem.Size()/8 {
		return nil, errValueLayout
	}
	terms := make([]*ast.Term, n)
	for i := uint32(0); i < n; i++ {
		v, ok := in.mem.ReadUint32Le(elems + 8*i + 4)
		if !ok {
			return nil, errValueLayout
		}
		t, err := in.readTerm(v, depth+1)
		if err != nil {
			return nil, err
		}
		terms[i] = t
	}
	return ast.ArrayTerm(terms...), nil
}

// readHashed reads an object (isObject) or a set value: n entries in nb
// hash buckets at buckets, each bucket a linked list of entries.
func (in *instance) readHashed(isObject bool, buckets, nb, n uint32, depth int) (*ast.Term, error) {
	if nb > in.mem.Size()/4 || n > in.mem.Size()/8 {
		return nil, errValueLayout
	}
	var obj ast.Object
	var set ast.Set
	if isObject {
		obj = ast.NewObject()
	} else {
		set = ast.NewSet()
	}
	seen := uint32(0)
	for b := uint32(0); b < nb; b++ {
		e, ok := in.mem.ReadUint32Le(buckets + 4*b)
		if !ok {
			return nil, errValueLayout
		}
		for e != 0 {
			if seen++; seen > n {
				return nil, errValueLayout
			}
			if obj != nil {
				k, ok1 := in.mem.ReadUint32Le(e)
				v, ok2 := in.mem.ReadUint32Le(e + 4)
				next, ok3 := in.mem.ReadUint32Le(e + 8)
				if !ok1 || !ok2 || !ok3 {
					return nil, errValueLayout
				}
				kt, err := in.readTerm(k, depth+1)
				if err != nil {
					return nil, err
				}
				vt, err := in.readTerm(v, depth+1)
				if err != nil {
					return nil, err
				}
				obj.Insert(kt, vt)
				e = next
			} else {
				v, ok1 := in.mem.ReadUint32Le(e)
				next, ok2 := in.mem.ReadUint32Le(e + 4)
				if !ok1 || !ok2 {
					return nil, errValueLayout
				}
				vt, err := in.readTerm(v, depth+1)
				if err != nil {
					return nil, err
				}
				set.Add(vt)
				e = next
			}
		}
	}
	if seen != n {
		return nil, errValueLayout
	}
	if obj != nil {
		return ast.NewTerm(obj), nil
	}
	return ast.NewTerm(set), nil
}

func (in *instance) bytesAt(ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	return in.mem.Read(ptr, n)
}

// appendValue writes v in the syntax opa_value_parse reads: JSON, with sets
// as {a, b} (set() when empty) and strings escaped as JSON does (so that NUL
// and control characters survive, unlike Go's quoting).
func appendValue(b []byte, v ast.Value) ([]byte, error) {
	switch x := v.(type) {
	case ast.Null:
		return append(b, "null"...), nil
	case ast.Boolean:
		if x {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case ast.Number:
		return append(b, x...), nil
	case ast.String:
		return jsonw.String(b, string(x)), nil
	case *ast.Array:
		b = append(b, '[')
		var err error
		for i := 0; i < x.Len(); i++ {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, x.Elem(i).Value); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case ast.Object:
		b = append(b, '{')
		var err error
		for i, k := range x.Keys() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, k.Value); err != nil {
				return nil, err
			}
			b = append(b, ':')
			if b, err = appendValue(b, x.Get(k).Value); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case ast.Set:
		if x.Len() == 0 {
			return append(b, "set()"...), nil
		}
		b = append(b, '{')
		var err error
		for i, e := range x.Slice() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, e.Value); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, errValueLayout
}
