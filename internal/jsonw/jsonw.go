// Package jsonw appends JSON values to byte slices without reflection,
// escaping strings exactly as encoding/json does, for the hot paths: the
// server's input documents and decision log events, and the values the
// engine hands to a policy from host builtins.
package jsonw

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// String appends s as a JSON string. Invalid UTF-8 is replaced by U+FFFD,
// and <, >, &, U+2028 and U+2029 are escaped, as encoding/json does.
func String(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plain8(s[i:]) {
			i += 8
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plain8 reports whether the first eight bytes of s (at least eight) are
// ASCII that String copies as is: none below 0x20 or at or above 0x80,
// and none of '"', '\\', '<', '>' and '&'.
func plain8(s string) bool {
	const (
		lo = 0x0101010101010101
		hi = 0x8080808080808080
	)
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	if x&hi != 0 {
		return false // a byte at or above 0x80
	}
	// For bytes below 0x80, (v - lo) & ^v & hi has a byte's high bit set
	// where v's byte is zero (and maybe above one, which only makes this
	// say false, never true wrongly); x - 0x20*lo likewise where x's byte
	// is below 0x20.
	zero := func(v uint64) uint64 { return (v - lo) & ^v & hi }
	m := (x - 0x20*lo) & ^x & hi
	m |= zero(x ^ '"'*lo)
	m |= zero(x ^ '\\'*lo)
	m |= zero(x ^ '<'*lo)
	m |= zero(x ^ '>'*lo)
	m |= zero(x ^ '&'*lo)
	return m == 0
}

// Float appends f as encoding/json does (shortest representation,
// exponent form outside [1e-6, 1e21)). NaN and infinities, which JSON
// cannot hold, are written as null.
func Float(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// Object appends m as a JSON object with its keys sorted (as
// encoding/json writes a map), each value written by val.
func Object[V any](dst []byte, m map[string]V, val func([]byte, V) []byte) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = String(dst, k)
		dst = append(dst, ':')
		dst = val(dst, m[k])
	}
	return append(dst, '}')
}
