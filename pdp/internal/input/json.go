package input

import (
	"strconv"

	"github.com/nexuspdp/nexus/internal/jsonw"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
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

// int64 writes a non-zero integer as a JSON number.
func (o *obj) int64(k string, v int64) {
	if v == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.buf = strconv.AppendInt(o.buf, v, 10)
}

func (o *obj) bytes(k string, v []byte) {
	if len(v) == 0 {
		return
	}
	if _, ok := o.member(k); !ok {
		return
	}
	o.buf = appendBase64(o.buf, v)
}

func (o *obj) close() []byte {
	return append(o.buf, '}')
}
