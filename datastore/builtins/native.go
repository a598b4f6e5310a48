package builtins

import (
	"context"
	"unsafe"
)

// DefaultPolicy decides the default policy's two entrypoints in Go, as
// its Rego (compiled to Wasm) decides them: nexus/envoy/result (a proxied
// request, nexus.envoy_decide on the input's method, path, JWT payloads and
// headers) and nexus/authz/decision (an application check: the resource's
// tenant, the ABAC conditions, RBAC, ReBAC). The Rego's own work is
// reading a few input fields and handing them to host builtins, yet
// entering the Wasm, parsing the input there, marshalling the builtin's
// arguments and parsing and writing its result cost several times what
// the builtins do; a server whose loaded policy is the default one asks
// this type instead.
//
// Every input it is not sure to read as the Rego does (a field of an
// unexpected type, a key repeated, a condition's value that is a number
// or a structure) and every store error make it answer ok == false: the
// caller evaluates the Wasm, which gives the answer (or the error) the
// policy defines. A result is the JSON value the Wasm writes, as
// canonical JSON (keys sorted, compact; the Wasm writes an object's keys
// in its hash table's order).
type DefaultPolicy struct {
	store Store
	table *Table
	// subjectHeader and tenantHeader are data.nexus.subject_header and
	// data.nexus.tenant_header ("" when data does not set them).
	subjectHeader, tenantHeader string
	// authz is whether the conditions' values are ones Authz compares
	// (strings, booleans, null).
	authz bool
}

// NewDefaultPolicy returns the default policy's native decisions over
// store with the policy data's route table and headers, or nil when the
// data holds something it would not write as the Wasm does (a condition
// whose reason needs escaping).
func NewDefaultPolicy(store Store, t *Table, subjectHeader, tenantHeader string) *DefaultPolicy {
	if t == nil {
		return nil
	}
	d := &DefaultPolicy{store: store, table: t, subjectHeader: subjectHeader, tenantHeader: tenantHeader, authz: true}
	for _, c := range t.Conditions {
		if !plain(c.Reason) {
			return nil
		}
		switch c.Value.(type) {
		case nil, bool, string:
		default:
			d.authz = false
		}
	}
	return d
}

// plain reports whether s is written the same by every JSON writer:
// printable ASCII with nothing to escape.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Envoy appends the result of nexus/envoy/result for the opa-envoy-plugin
// input document input (as the server writes it, maybe pruned to what
// the policy reads).
func (d *DefaultPolicy) Envoy(ctx context.Context, input, dst []byte) ([]byte, bool) {
	in := unsafe.String(unsafe.SliceData(input), len(input))
	var req envoyRequest
	top, ok := members(in, "attributes", "parsed_path")
	if !ok {
		return dst, false
	}
	path := top[1]
	if path == "" {
		return dst, false // no parsed_path: the policy is undefined
	}
	attrs, ok := members(top[0], "request", "metadataContext")
	if !ok {
		return dst, false
	}
	http, ok := members(attrs[0], "http")
	if !ok {
		return dst, false
	}
	fields, ok := members(http[0], "method", "headers")
	if !ok {
		return dst, false
	}
	if fields[0] != "" {
		if req.method, ok = unquoted(fields[0]); !ok {
			return dst, false
		}
	}
	headers, ok := members(fields[1], d.subjectHeader, d.tenantHeader)
	if !ok {
		return dst, false
	}
	header := "null"
	if d.subjectHeader != "" && headers[0] != "" {
		header = headers[0]
	}
	if d.tenantHeader != "" && headers[1] != "" {
		if req.tenant, ok = unquoted(headers[1]); !ok {
			return dst, false
		}
	}
	jwt, found, ok := lookup(attrs[1], "filterMetadata", "envoy.filters.http.jwt_authn")
	if !ok {
		return dst, false
	}
	if !found {
		jwt = "null"
	}
	sc := scanner{s: path}
	if !sc.next('[') {
		return dst, false
	}
	// The path is kept apart from req, which escapes, so that its
	// segments stay on the stack.
	var segs [8]string
	segPath := segs[:0]
	for first := true; !sc.next(']'); first = false {
		if !first && !sc.next(',') {
			return dst, false
		}
		seg, ok := sc.str()
		if !ok {
			return dst, false
		}
		segPath = append(segPath, seg)
	}
	if sc.i != len(sc.s) || req.identify(jwt, header) != nil {
		return dst, false
	}
	var out []byte
	err := d.read(ctx, func(r reader) (err error) {
		out, err = envoyResult(r, dst, d.table, &req, segPath)
		return err
	})
	if err != nil {
		return dst, false
	}
	return out, true
}

// read calls fn with a reader of the store: one View of it when it is a
// *datastore.BoltStore.
func (d *DefaultPolicy) read(ctx context.Context, fn func(r reader) error) error {
	return withView(ctx, d.store, func(l storeView) error { return fn(reader{l}) })
}

// Authz appends the result of nexus/authz/decision for the application
// check input ({"subject", "action", "resource", ...}).
func (d *DefaultPolicy) Authz(ctx context.Context, input, dst []byte) ([]byte, bool) {
	if !d.authz {
		return dst, false
	}
	in := unsafe.String(unsafe.SliceData(input), len(input))
	top, ok := members(in, "subject", "action", "resource")
	if !ok {
		return dst, false
	}
	subj, ok1 := members(top[0], "type", "id")
	resource, ok2 := members(top[2], "type", "id", "tenant", "attributes")
	if !ok1 || !ok2 {
		return dst, false
	}
	// subject type and id, action, resource type, id and tenant
	var f [6]string
	for i, raw := range [6]string{subj[0], subj[1], top[1], resource[0], resource[1], resource[2]} {
		if raw == "" {
			if i < 4 {
				return dst, false // the Rego's other definitions decide
			}
			continue
		}
		if f[i], ok = unquoted(raw); !ok {
			return dst, false
		}
	}
	attrs := resource[3]
	if attrs != "" && !isObject(attrs) {
		return dst, false
	}
	var out []byte
	ok = true
	err := d.read(ctx, func(r reader) error {
		var err error
		out, ok, err = d.authz1(r, dst, &f, attrs)
		return err
	})
	if err != nil || !ok {
		return dst, false
	}
	return out, true
}

// authz1 is Authz on the input's subject type and id, action, resource
// type, id and tenant f and the resource's attributes (JSON text or ""):
// the answer written after dst.
func (d *DefaultPolicy) authz1(r reader, dst []byte, f *[6]string, attrs string) ([]byte, bool, error) {
	a, ok, err := d.authzAnswer(r, f, attrs)
	if err != nil || !ok {
		return dst, ok, err
	}
	return a.AppendJSON(dst), true, nil
}

// authzAnswer is authz1's answer, unwritten.
func (d *DefaultPolicy) authzAnswer(r reader, f *[6]string, attrs string) (Answer, bool, error) {
	vd, tenant, err := r.resourceTenant(f[0], f[1], f[3], f[4], f[5])
	if err != nil {
		return Answer{}, false, err
	}
	reason := ""
	switch vd {
	case verdictMismatch:
		reason = "tenant_mismatch"
	case verdictNone:
		reason = "no_tenant"
	default:
		for _, c := range d.table.Conditions {
			if !c.appliesTo(f[3], f[2]) || (reason != "" && c.Reason >= reason) {
				continue
			}
			v, found, ok := lookup(attrs, c.Attribute)
			if !ok {
				return Answer{}, false, nil
			}
			if !found {
				v = "null"
			}
			if equal(v, c.Value) {
				reason = c.Reason
			}
		}
	}
	if reason == "" {
		g, err := r.grant(f[0], f[1], f[2], f[3], f[4], tenant)
		if err != nil {
			return Answer{}, false, err
		}
		if g != "" {
			return Answer{Allowed: true, Reason: g}, true, nil
		}
		reason = "no_grant"
	}
	return Answer{Reason: reason}, true, nil
}

// equal reports whether the JSON text v equals the condition value c (a
// string, a boolean or null), as Rego compares them.
func equal(v string, c any) bool {
	switch c := c.(type) {
	case nil:
		return v == "null"
	case bool:
		return v == "true" && c || v == "false" && !c
	case string:
		s, ok := unquoted(v)
		return ok && s == c
	}
	return false
}

func isObject(v string) bool { return len(v) > 0 && v[0] == '{' }

// unquoted decodes v if it is a JSON string.
func unquoted(v string) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	return unquote(v)
}

// lookup finds the value under keys in the JSON text doc, an object of
// objects. found is false when a key is missing or a value on the way is
// not an object (where Rego's reference is undefined too); ok is false
// when doc is not JSON it reads with certainty (a key repeated).
func lookup(doc string, keys ...string) (raw string, found, ok bool) {
	raw = doc
	for _, k := range keys {
		v, ok := members(raw, k)
		if !ok {
			return "", false, false
		}
		if v[0] == "" {
			return "", false, true
		}
		raw = v[0]
	}
	return raw, true, true
}

// members finds the values of up to four keys in the JSON text doc in one
// pass: a key's value's text, or "" when doc is not an object or lacks
// it. ok is false when doc is not JSON it reads with certainty (a key it
// looks for repeated).
func members(doc string, keys ...string) (vals [4]string, ok bool) {
	if !isObject(doc) {
		return vals, true
	}
	sc := scanner{s: doc}
	sc.next('{')
	for first := true; !sc.next('}'); first = false {
		if !first && !sc.next(',') {
			return vals, false
		}
		k, plain, ok := sc.rawKey()
		if !ok || !sc.next(':') {
			return vals, false
		}
		v, ok := sc.value()
		if !ok {
			return vals, false
		}
		for i, want := range keys {
			if plain && k != want {
				continue
			}
			if !plain {
				s, ok := unquote(`"` + k + `"`)
				if !ok {
					return vals, false
				}
				if s != want {
					continue
				}
			}
			if vals[i] != "" {
				return vals, false
			}
			vals[i] = v
		}
	}
	return vals, true
}

// rawKey consumes an object's key and returns its text between the
// quotes, and whether it has no escapes (the text is then the key).
func (sc *scanner) rawKey() (string, bool, bool) {
	sc.skipSpace()
	if sc.i >= len(sc.s) || sc.s[sc.i] != '"' {
		return "", false, false
	}
	start := sc.i + 1
	plain := true
	for i := start; i < len(sc.s); i++ {
		switch sc.s[i] {
		case '"':
			sc.i = i + 1
			return sc.s[start:i], plain, true
		case '\\':
			plain = false
			i++
		}
	}
	return "", false, false
}
