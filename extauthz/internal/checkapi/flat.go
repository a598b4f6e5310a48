package checkapi

import (
	"bytes"
	"io"
	"strings"
	"unicode/utf8"
)

// The bodies of most checks are a few objects of plain strings. The flat
// reader reads those without encoding/json's reflection, and says so
// when a body is anything else (an escape, a number, a boolean, null, an
// array, a key spelt otherwise than the field it fills, a key repeated):
// the reader then decodes the body with encoding/json as before, so that
// every body means what it meant (FuzzFlatReaders holds the two to it).
//
// It reads the body in one pass, straight into the fields of the request
// shape it expects, and the strings it finds are parts of one copy of
// the body: a check's body costs that copy and the maps of its
// properties, if it has any.

// flatParser reads a body that has no backslash (so no escapes) and is
// valid UTF-8.
type flatParser struct {
	s string
	i int
}

// newFlat returns a parser of the body r holds, when it is a
// *bytes.Buffer (left untouched, for the other reader) without a
// backslash and valid UTF-8.
func newFlat(r io.Reader) (flatParser, bool) {
	b, ok := r.(*bytes.Buffer)
	if !ok {
		return flatParser{}, false
	}
	body := b.Bytes()
	if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return flatParser{}, false
	}
	return flatParser{s: string(body)}, true
}

func (p *flatParser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// next consumes c if it comes next.
func (p *flatParser) next(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// isStr reports whether a string comes next.
func (p *flatParser) isStr() bool {
	p.space()
	return p.i < len(p.s) && p.s[p.i] == '"'
}

// end reports whether only white space is left.
func (p *flatParser) end() bool {
	p.space()
	return p.i == len(p.s)
}

// str reads a string (the body has no backslash: no escapes).
func (p *flatParser) str() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	end := strings.IndexByte(p.s[p.i:], '"')
	if end < 0 {
		return "", false
	}
	s := p.s[p.i : p.i+end]
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			return "", false // a control character: not JSON
		}
	}
	p.i += end + 1
	return s, true
}

// object reads an object, handing each member's key, in order, to
// member, which reads the member's value. A member that returns false,
// or an object that is not well formed, is false.
func (p *flatParser) object(member func(key string) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		k, ok := p.str()
		if !ok || !p.next(':') || !member(k) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// once marks the key with bit in seen, and is false if it was already
// there (encoding/json would keep the last of two).
func once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// strings reads an object of strings, each key once, as attributes.
func (p *flatParser) strings() (map[string]any, bool) {
	m := map[string]any{}
	ok := p.object(func(k string) bool {
		if _, dup := m[k]; dup {
			return false
		}
		v, ok := p.str()
		m[k] = v
		return ok
	})
	return m, ok
}

// readPermitFlat reads a flat /allowed body: user (a key or {"key"}),
// action, resource ({"type", "key", "tenant"} or "type:key"). ok is
// false when the body is not such a body.
func readPermitFlat(r io.Reader) (c Check, ok bool, err error) {
	p, ok := newFlat(r)
	if !ok {
		return Check{}, false, nil
	}
	var u permitUser
	var res permitResource
	var action, resStr string
	var seen uint8
	ok = p.object(func(k string) bool {
		switch k {
		case "user":
			if !once(&seen, 1) {
				return false
			}
			if p.isStr() {
				u.Key, ok = p.str()
				return ok
			}
			var keys uint8
			return p.object(func(k string) bool {
				if k != "key" || !once(&keys, 1) {
					return false
				}
				u.Key, ok = p.str()
				return ok
			})
		case "action":
			if !once(&seen, 2) {
				return false
			}
			action, ok = p.str()
			return ok
		case "resource":
			if !once(&seen, 4) {
				return false
			}
			if p.isStr() {
				resStr, ok = p.str()
				// "" is no resource: encoding/json's reader names
				// the error.
				return ok && resStr != ""
			}
			var keys uint8
			return p.object(func(k string) bool {
				var f *string
				switch k {
				case "type":
					f, ok = &res.Type, once(&keys, 1)
				case "key":
					f, ok = &res.Key, once(&keys, 2)
				case "tenant":
					f, ok = &res.Tenant, once(&keys, 4)
				default:
					return false
				}
				if ok {
					*f, ok = p.str()
				}
				return ok
			})
		}
		return false
	})
	if !ok || seen != 7 || !p.end() {
		return Check{}, false, nil
	}
	c, err = permitCheck(u, res, resStr, action, nil)
	return c, true, err
}

// readAuthZENFlat reads a flat evaluation body: subject and resource
// ({"type", "id", "properties"}), action ({"name", "properties"}), with
// properties of strings. It reads them into s, a and res, and returns
// those it found (nil for the others).
func readAuthZENFlat(r io.Reader, s *authzenEntity, a *authzenAction, res *authzenEntity) (subject *authzenEntity, action *authzenAction, resource *authzenEntity, ok bool) {
	p, ok := newFlat(r)
	if !ok {
		return nil, nil, nil, false
	}
	var seen uint8
	ok = p.object(func(k string) bool {
		switch k {
		case "subject":
			subject = s
			return once(&seen, 1) && p.entity(s)
		case "resource":
			resource = res
			return once(&seen, 2) && p.entity(res)
		case "action":
			action = a
			return once(&seen, 4) && p.action(a)
		}
		return false
	})
	if !ok || !p.end() {
		return nil, nil, nil, false
	}
	return subject, action, resource, true
}

// entity reads an AuthZEN subject or resource into e.
func (p *flatParser) entity(e *authzenEntity) bool {
	var keys uint8
	return p.object(func(k string) (ok bool) {
		switch k {
		case "type":
			if ok = once(&keys, 1); ok {
				e.Type, ok = p.str()
			}
		case "id":
			if ok = once(&keys, 2); ok {
				e.ID, ok = p.str()
			}
		case "properties":
			if ok = once(&keys, 4); ok {
				e.Properties, ok = p.strings()
			}
		}
		return ok
	})
}

// action reads an AuthZEN action into a.
func (p *flatParser) action(a *authzenAction) bool {
	var keys uint8
	return p.object(func(k string) (ok bool) {
		switch k {
		case "name":
			if ok = once(&keys, 1); ok {
				a.Name, ok = p.str()
			}
		case "properties":
			if ok = once(&keys, 2); ok {
				a.Properties, ok = p.strings()
			}
		}
		return ok
	})
}
