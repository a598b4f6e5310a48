package checkapi

import (
	"bytes"
	"io"
	"unicode/utf8"
)

// The bodies of most checks are a few objects of plain strings. The flat
// reader reads those without encoding/json's reflection, and says so
// when a body is anything else (an escape, a number, a boolean, null, an
// array, a key spelt otherwise than the field it fills, a key repeated):
// the reader then decodes the body with encoding/json as before, so that
// every body means what it meant (FuzzFlatReaders holds the two to it).

// flat is a JSON value the flat reader accepts: a string, or an object of
// such values (obj != nil).
type flat struct {
	str string
	obj []flatMember
}

type flatMember struct {
	key string
	val flat
}

// get returns the member key of an object and whether it is there.
func (f *flat) get(key string) (*flat, bool) {
	for i := range f.obj {
		if f.obj[i].key == key {
			return &f.obj[i].val, true
		}
	}
	return nil, false
}

// only reports whether f is an object whose keys are all among keys, and
// each at most once (encoding/json would match a key spelt in another
// case to a field, and keep the last of two).
func (f *flat) only(keys ...string) bool {
	if f.obj == nil {
		return false
	}
	for i, m := range f.obj {
		found := false
		for _, k := range keys {
			if m.key == k {
				found = true
				break
			}
		}
		if !found {
			return false
		}
		for _, o := range f.obj[:i] {
			if o.key == m.key {
				return false
			}
		}
	}
	return true
}

// strings returns the members of an object of strings as attributes.
func (f *flat) strings() (map[string]any, bool) {
	if f.obj == nil {
		return nil, false
	}
	m := make(map[string]any, len(f.obj))
	for _, x := range f.obj {
		if x.val.obj != nil {
			return nil, false
		}
		if _, dup := m[x.key]; dup {
			return nil, false
		}
		m[x.key] = x.val.str
	}
	return m, true
}

// readFlat reads the body r holds, when it is a *bytes.Buffer (left
// untouched, for the other reader), as an object of strings and objects,
// nested at most three deep.
func readFlat(r io.Reader) (flat, bool) {
	b, ok := r.(*bytes.Buffer)
	if !ok {
		return flat{}, false
	}
	body := b.Bytes()
	if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return flat{}, false
	}
	p := flatParser{b: body}
	v, ok := p.value(3)
	if !ok || v.obj == nil {
		return flat{}, false
	}
	p.space()
	if p.i != len(p.b) {
		return flat{}, false
	}
	return v, true
}

type flatParser struct {
	b []byte
	i int
}

func (p *flatParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// next consumes c if it comes next.
func (p *flatParser) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string (the body has no backslash: no escapes).
func (p *flatParser) str() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	end := bytes.IndexByte(p.b[p.i:], '"')
	if end < 0 {
		return "", false
	}
	s := p.b[p.i : p.i+end]
	for _, c := range s {
		if c < 0x20 {
			return "", false // a control character: not JSON
		}
	}
	p.i += end + 1
	return string(s), true
}

// value reads a string or an object nested at most depth deep.
func (p *flatParser) value(depth int) (flat, bool) {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '"' {
		s, ok := p.str()
		return flat{str: s}, ok
	}
	if depth == 0 || !p.next('{') {
		return flat{}, false
	}
	v := flat{obj: make([]flatMember, 0, 4)}
	for first := true; !p.next('}'); first = false {
		if !first && !p.next(',') {
			return flat{}, false
		}
		k, ok := p.str()
		if !ok || !p.next(':') {
			return flat{}, false
		}
		m, ok := p.value(depth - 1)
		if !ok {
			return flat{}, false
		}
		v.obj = append(v.obj, flatMember{key: k, val: m})
	}
	return v, true
}

// readPermitFlat reads a flat /allowed body: user (a key or {"key"}),
// action, resource ({"type", "key", "tenant"} or "type:key").
func readPermitFlat(f flat) (Check, bool, error) {
	if !f.only("user", "action", "resource") {
		return Check{}, false, nil
	}
	user, ok1 := f.get("user")
	action, ok2 := f.get("action")
	res, ok3 := f.get("resource")
	if !ok1 || !ok2 || !ok3 || action.obj != nil {
		return Check{}, false, nil
	}
	var u permitUser
	switch {
	case user.obj == nil:
		u.Key = user.str
	case user.only("key"):
		if k, ok := user.get("key"); ok {
			if k.obj != nil {
				return Check{}, false, nil
			}
			u.Key = k.str
		}
	default:
		return Check{}, false, nil
	}
	var r permitResource
	var resStr string
	switch {
	case res.obj == nil:
		resStr = res.str
	case res.only("type", "key", "tenant"):
		for _, m := range res.obj {
			if m.val.obj != nil {
				return Check{}, false, nil
			}
			switch m.key {
			case "type":
				r.Type = m.val.str
			case "key":
				r.Key = m.val.str
			case "tenant":
				r.Tenant = m.val.str
			}
		}
	default:
		return Check{}, false, nil
	}
	if res.obj == nil && resStr == "" {
		return Check{}, false, nil // encoding/json's reader names the error
	}
	c, err := permitCheck(u, r, resStr, action.str, nil)
	return c, true, err
}

// readAuthZENFlat reads a flat evaluation body: subject and resource
// ({"type", "id", "properties"}), action ({"name", "properties"}), with
// properties of strings.
func readAuthZENFlat(f flat) (authzenRequest, bool) {
	if !f.only("subject", "action", "resource") {
		return authzenRequest{}, false
	}
	var req authzenRequest
	for _, m := range f.obj {
		var ok bool
		switch m.key {
		case "subject":
			req.Subject, ok = authzenEntityFlat(&m.val)
		case "resource":
			req.Resource, ok = authzenEntityFlat(&m.val)
		case "action":
			req.Action, ok = authzenActionFlat(&m.val)
		}
		if !ok {
			return authzenRequest{}, false
		}
	}
	return req, true
}

func authzenEntityFlat(f *flat) (*authzenEntity, bool) {
	if !f.only("type", "id", "properties") {
		return nil, false
	}
	e := &authzenEntity{}
	for _, m := range f.obj {
		switch m.key {
		case "type", "id":
			if m.val.obj != nil {
				return nil, false
			}
			if m.key == "type" {
				e.Type = m.val.str
			} else {
				e.ID = m.val.str
			}
		case "properties":
			var ok bool
			if e.Properties, ok = m.val.strings(); !ok {
				return nil, false
			}
		}
	}
	return e, true
}

func authzenActionFlat(f *flat) (*authzenAction, bool) {
	if !f.only("name", "properties") {
		return nil, false
	}
	a := &authzenAction{}
	for _, m := range f.obj {
		switch m.key {
		case "name":
			if m.val.obj != nil {
				return nil, false
			}
			a.Name = m.val.str
		case "properties":
			var ok bool
			if a.Properties, ok = m.val.strings(); !ok {
				return nil, false
			}
		}
	}
	return a, true
}
