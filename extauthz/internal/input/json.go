package input

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"
)

// appendString appends s as a JSON string. Invalid UTF-8 is replaced by
// U+FFFD, as protojson and encoding/json do.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' && c != 0x7f {
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

// obj writes the members of a JSON object, handling the commas.
type obj struct {
	buf   []byte
	first bool
}

func (o *obj) open(dst []byte) {
	o.buf = append(dst, '{')
	o.first = true
}

func (o *obj) key(k string) {
	if !o.first {
		o.buf = append(o.buf, ',')
	}
	o.first = false
	o.buf = appendString(o.buf, k)
	o.buf = append(o.buf, ':')
}

func (o *obj) str(k, v string) {
	if v == "" {
		return
	}
	o.key(k)
	o.buf = appendString(o.buf, v)
}

func (o *obj) raw(k string, v []byte) {
	o.key(k)
	o.buf = append(o.buf, v...)
}

func (o *obj) int64str(k string, v int64) {
	if v == 0 {
		return
	}
	o.key(k)
	o.buf = append(o.buf, '"')
	o.buf = strconv.AppendInt(o.buf, v, 10)
	o.buf = append(o.buf, '"')
}

func (o *obj) uint32(k string, v uint32) {
	if v == 0 {
		return
	}
	o.key(k)
	o.buf = strconv.AppendUint(o.buf, uint64(v), 10)
}

func (o *obj) bytes(k string, v []byte) {
	if len(v) == 0 {
		return
	}
	o.key(k)
	o.buf = append(o.buf, '"')
	o.buf = base64.StdEncoding.AppendEncode(o.buf, v)
	o.buf = append(o.buf, '"')
}

func (o *obj) close() []byte {
	return append(o.buf, '}')
}
