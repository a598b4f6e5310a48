package input

import (
	"encoding/base64"
	"strconv"

	"github.com/nexuspdp/nexus/extauthz/internal/prune"
	"github.com/nexuspdp/nexus/internal/jsonw"
)

// appendString appends s as a JSON string (see jsonw.String).
func appendString(dst []byte, s string) []byte { return jsonw.String(dst, s) }

// obj writes the members of a JSON object, handling the commas.
// Members not in sel (when sel is not nil) are left out.
type obj struct {
	buf   []byte
	first bool
	sel   *prune.Tree
}

// member starts member k if sel keeps it, and returns the selection under
// it.
func (o *obj) member(k string) (*prune.Tree, bool) {
	c, ok := o.sel.Child(k)
	if ok {
		o.key(k)
	}
	return c, ok
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
	if _, ok := o.member(k); !ok {
		return
	}
	o.buf = appendString(o.buf, v)
}

func (o *obj) int64str(k string, v int64) {
	if v == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.buf = append(o.buf, '"')
	o.buf = strconv.AppendInt(o.buf, v, 10)
	o.buf = append(o.buf, '"')
}

func (o *obj) uint32(k string, v uint32) {
	if v == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.buf = strconv.AppendUint(o.buf, uint64(v), 10)
}

func (o *obj) bytes(k string, v []byte) {
	if len(v) == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.buf = append(o.buf, '"')
	o.buf = base64.StdEncoding.AppendEncode(o.buf, v)
	o.buf = append(o.buf, '"')
}

func (o *obj) close() []byte {
	return append(o.buf, '}')
}
