package engine

import (
	"errors"
	"strconv"
)

// errDumpDepth stops the serialisation of a value nested deeper than
// maxValueDepth (which the runtime's own writer would also refuse to
// finish in its stack).
var errDumpDepth = errors.New("engine: result nested too deeply")

// errDumpNumber stops the serialisation of a number whose text is not a
// JSON number (OPA's Wasm runtime makes one of to_number(".")).
var errDumpNumber = errors.New("engine: result holds a number that is not JSON")

// appendJSON appends the JSON of the value at p in module memory m,
// byte for byte as the runtime's opa_json_dump writes it: collections in
// the runtime's iteration order, sets as arrays, a non-string object key
// as the string of its JSON, strings escaped as its writer escapes them.
// What it writes is valid JSON (json.Valid), checked as it goes: a
// number whose text is not a JSON number panics with errDumpNumber, a
// value nested deeper than maxValueDepth with errDumpDepth; strings and
// keys are always escaped into valid JSON strings (json.Valid does not
// ask for UTF-8). A malformed value panics (an index out of range);
// dumpResult recovers.
func appendJSON(dst, m []byte, p uint32, depth int) []byte {
	return appendDump(dst, m, p, depth, true)
}

// appendDump is appendJSON; numbers are checked when strict (not in a
// non-string key, which is written as a string).
func appendDump(dst, m []byte, p uint32, depth int, strict bool) []byte {
	if depth > maxValueDepth {
		panic(errDumpDepth)
	}
	switch valueType(m, p) {
	case opaNull:
		return append(dst, "null"...)
	case opaBoolean:
		if m[p+1] != 0 {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case opaNumber:
		i, text, isInt := numberAt(m, p)
		if isInt {
			return strconv.AppendInt(dst, i, 10)
		}
		if p := (jsonParser{b: text}); strict && (len(text) == 0 || !p.number() || p.i != len(text)) {
			panic(errDumpNumber)
		}
		return append(dst, text...)
	case opaString:
		return appendDumpString(dst, stringAt(m, p))
	case opaArray:
		dst = append(dst, '[')
		es, n := le32(m, p+4), le32(m, p+8)
		for i := uint32(0); i < n; i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendDump(dst, m, le32(m, es+8*i+4), depth+1, strict)
		}
		return append(dst, ']')
	case opaSet:
		dst = append(dst, '[')
		first := true
		walkSet(m, p, func(v uint32) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = appendDump(dst, m, v, depth+1, strict)
		})
		return append(dst, ']')
	case opaObject:
		dst = append(dst, '{')
		first := true
		walkObject(m, p, func(k, v uint32) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			if valueType(m, k) == opaString {
				dst = appendDumpString(dst, stringAt(m, k))
			} else {
				dst = appendDumpString(dst, appendDump(nil, m, k, depth+1, false))
			}
			dst = append(dst, ':')
			dst = appendDump(dst, m, v, depth+1, strict)
		})
		return append(dst, '}')
	}
	panic(errValueLayout)
}

const hexDigits = "0123456789abcdef"

// appendDumpString escapes as the runtime's writer does: '"' and '\\'
// with a backslash, \n \r \t by name, other bytes below 0x20 as \u00xx;
// everything else, including non-ASCII bytes, as is.
func appendDumpString(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i, c := range s {
		if c >= ' ' && c != '\\' && c != '"' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '\\', '"':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// resultValue finds v in the result set {{"result": v}} an entrypoint
// evaluates to. n is the set's length (0: undefined).
func resultValue(m []byte, set uint32) (v uint32, n uint32, ok bool) {
	if valueType(m, set) != opaSet {
		return 0, 0, false
	}
	n = le32(m, set+12)
	if n != 1 {
		return 0, n, true
	}
	var obj uint32
	walkSet(m, set, func(e uint32) { obj = e })
	if obj == 0 || valueType(m, obj) != opaObject || le32(m, obj+12) != 1 {
		return 0, n, false
	}
	walkObject(m, obj, func(k, val uint32) {
		if valueType(m, k) == opaString && string(stringAt(m, k)) == "result" {
			v = val
		}
	})
	return v, n, v != 0
}
