package input

import (
	"encoding/base64"
	"strconv"

	"github.com/nexuspdp/nexus/extauthz/internal/jsonw"
)

// appendString appends s as a JSON string (see jsonw.String).
func appendString(dst []byte, s string) []byte { return jsonw.String(dst, s) }

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
