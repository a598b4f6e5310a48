package engine

import "strconv"

// Kind is the type of a Value.
type Kind uint8

// The kinds of value, as OPA's Wasm runtime has them.
const (
	KindNull   Kind = opaNull
	KindBool   Kind = opaBoolean
	KindNumber Kind = opaNumber
	KindString Kind = opaString
	KindArray  Kind = opaArray
	KindObject Kind = opaObject
	KindSet    Kind = opaSet
)

// Value is an argument of a Values2 builtin: a read-only view of a value
// in the policy instance's memory, read in place (no JSON written or
// parsed). It is valid only during the call; strings it returns point
// into the instance's memory and must be copied (strings.Clone) to be
// kept. The zero Value is not a value: its methods panic, as they do on
// a value the runtime did not lay out (the evaluation then fails).
type Value struct {
	m []byte
	p uint32
}

// Kind is the value's type.
func (v Value) Kind() Kind { return Kind(valueType(v.m, v.p)) }

// Str is the string, when the value is one.
func (v Value) Str() (string, bool) {
	if valueType(v.m, v.p) != opaString {
		return "", false
	}
	return unsafeString(stringAt(v.m, v.p)), true
}

// Bool is the boolean, when the value is one.
func (v Value) Bool() (b, ok bool) {
	if valueType(v.m, v.p) != opaBoolean {
		return false, false
	}
	return v.m[v.p+1] != 0, true
}

// Number appends the number's JSON text to dst, when the value is a
// number: its text as the runtime holds it ("1.0" stays "1.0").
func (v Value) Number(dst []byte) ([]byte, bool) {
	if valueType(v.m, v.p) != opaNumber {
		return dst, false
	}
	i, text, isInt := numberAt(v.m, v.p)
	if isInt {
		return strconv.AppendInt(dst, i, 10), true
	}
	return append(dst, text...), true
}

// Len is the number of elements of an array or a set, or of entries of
// an object; 0 for other values.
func (v Value) Len() int {
	switch valueType(v.m, v.p) {
	case opaArray:
		return int(le32(v.m, v.p+8))
	case opaObject, opaSet:
		return int(le32(v.m, v.p+12))
	}
	return 0
}

// Index is the i'th element of an array. It panics when the value is not
// an array or i is out of range.
func (v Value) Index(i int) Value {
	if valueType(v.m, v.p) != opaArray || i < 0 || i >= v.Len() {
		panic("engine: Value.Index of a non-array or out of range")
	}
	return Value{v.m, le32(v.m, le32(v.m, v.p+4)+8*uint32(i)+4)}
}

// AppendJSON appends the value's JSON as the runtime's json.marshal
// writes it: collections in the runtime's order, sets as arrays, a
// non-string key as the string of its JSON, strings escaped as the
// runtime escapes them (bytes that are not UTF-8 kept as they are).
func (v Value) AppendJSON(dst []byte) []byte { return appendDump(dst, v.m, v.p, 0, false) }
