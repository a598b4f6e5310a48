package policy

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"unsafe"

	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/internal/datadoc"
	"github.com/nexuspdp/nexus/internal/jsonscan"
	"github.com/nexuspdp/nexus/internal/jsonw"
	"github.com/nexuspdp/nexus/pdp/decider"
)

// Decider is the factory of the default policy's Go decider over store,
// the relationship store its builtins read: it accepts a policy whose
// Wasm is the default policy as nexus compiles it (WasmSHA256), whatever
// its data, and declines any other.
//
// The decider decides the policy's two entrypoints in Go, as its Rego
// (compiled to Wasm) decides them: nexus/envoy/result (a proxied request,
// nexus.envoy_decide on the input's method, path, JWT payloads and
// headers) and nexus/authz/decision (an application check: the
// resource's tenant, the ABAC conditions, RBAC, ReBAC). The Rego's own
// work is reading a few input fields and handing them to host builtins,
// yet entering the Wasm, parsing the input there, marshalling the
// builtin's arguments and parsing and writing its result cost several
// times what the builtins do.
//
// Every input it is not sure to read as the Rego does (a field of an
// unexpected type, a key repeated, a condition's value that is a number
// or a structure) and every store error make it decline: the Wasm then
// gives the answer (or the error) the policy defines. A result document
// is the JSON value the Wasm writes, as canonical JSON (keys sorted,
// compact; the Wasm writes an object's keys in its hash table's order).
func Decider(store builtins.Store) decider.Factory {
	return func(p *decider.Policy) decider.Decider {
		if p.WasmSHA256 != WasmSHA256 {
			return nil
		}
		d := newDefaultDecider(store, p.Data)
		if d == nil {
			return nil
		}
		d.envoy = p.EnvoyEntrypoint == EnvoyEntrypoint
		d.authzEP = p.AuthzEntrypoint == AuthzEntrypoint
		return d
	}
}

// defaultDecider is the default policy's decider.Decider.
type defaultDecider struct {
	store builtins.Store
	table *builtins.Table
	// subjectHeader and tenantHeader are data.nexus.subject_header and
	// data.nexus.tenant_header ("" when data does not set them).
	subjectHeader, tenantHeader string
	// authz is whether the conditions' values are ones it compares
	// (strings, booleans, null).
	authz bool
	// envoy and authzEP are whether the core evaluates this policy's
	// entrypoints for proxied requests and application checks.
	envoy, authzEP bool
}

var _ decider.Decider = (*defaultDecider)(nil)

// newDefaultDecider reads the route table and headers of data (as the
// core loads it), or returns nil when data lacks the route table or
// holds something the decider would not write as the Wasm does (a
// header that is not a string, a condition whose reason needs escaping).
func newDefaultDecider(store builtins.Store, data []byte) *defaultDecider {
	raw, ok, err := datadoc.Member(data, "nexus")
	if err != nil || !ok {
		return nil
	}
	var nx map[string]json.RawMessage
	if json.Unmarshal(raw, &nx) != nil {
		return nil
	}
	var text string
	if json.Unmarshal(nx["route_table"], &text) != nil {
		return nil
	}
	t, err := builtins.ParseTable(text)
	if err != nil {
		return nil
	}
	d := &defaultDecider{store: store, table: t, authz: true}
	for k, dst := range map[string]*string{"subject_header": &d.subjectHeader, "tenant_header": &d.tenantHeader} {
		v, ok := nx[k]
		if ok && (len(v) == 0 || v[0] != '"' || json.Unmarshal(v, dst) != nil) {
			return nil // not a string
		}
	}
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

func (d *defaultDecider) Decides(entrypoint string) bool {
	return d.envoy && entrypoint == EnvoyEntrypoint || d.authzEP && entrypoint == AuthzEntrypoint
}

// Envoy answers a request given by the fields of its input document
// that the policy reads: method (attributes.request.http.method), path
// (parsed_path), headers (attributes.request.http.headers) and jwt.
func (d *defaultDecider) Envoy(ctx context.Context, r *decider.Request) (decider.Answer, bool) {
	tenant := ""
	if d.tenantHeader != "" {
		tenant = r.Headers[d.tenantHeader]
	}
	req := builtins.NewEnvoyRequest(r.Method, tenant)
	if r.JWT != nil {
		// A verified JWT decides; the header counts only without one.
		if req.Identify(string(r.JWT), "null") != nil {
			return decider.Answer{}, false
		}
	} else if v, ok := r.Headers[d.subjectHeader]; ok && d.subjectHeader != "" {
		req.Claim(v)
	}
	var a decider.Answer
	err := builtins.Read(ctx, d.store, func(v builtins.View) (err error) {
		a, err = v.EnvoyDecide(d.table, &req, r.Path)
		return err
	})
	if err != nil {
		return decider.Answer{}, false
	}
	return a, true
}

// Authz answers an application check given by its fields.
func (d *defaultDecider) Authz(ctx context.Context, c *decider.Check) (decider.Answer, bool) {
	if !d.authz {
		return decider.Answer{}, false
	}
	attrs := ""
	if c.TenantAttribute && d.conditioned(c.Fields[3], c.Fields[2]) { // only conditions read attributes
		var b [64]byte
		attrs = string(append(jsonw.String(append(b[:0], `{"tenant":`...), c.Fields[5]), '}'))
	}
	return d.authzAnswer(ctx, &c.Fields, attrs)
}

// authzAnswer is the answer to the check of subject type and id, action,
// resource type, id and tenant f and the resource's attributes (JSON
// text or "").
func (d *defaultDecider) authzAnswer(ctx context.Context, f *[6]string, attrs string) (decider.Answer, bool) {
	var a decider.Answer
	ok := true
	err := builtins.Read(ctx, d.store, func(v builtins.View) error {
		var err error
		a, ok, err = d.authzView(v, f, attrs)
		return err
	})
	if err != nil || !ok {
		return decider.Answer{}, false
	}
	return a, true
}

func (d *defaultDecider) authzView(v builtins.View, f *[6]string, attrs string) (decider.Answer, bool, error) {
	tenant, reason, err := v.ResourceTenant(f[0], f[1], f[3], f[4], f[5])
	if err != nil {
		return decider.Answer{}, false, err
	}
	if reason == "" {
		for _, c := range d.table.Conditions {
			if !c.AppliesTo(f[3], f[2]) || (reason != "" && c.Reason >= reason) {
				continue
			}
			val, found, ok := jsonscan.Lookup(attrs, c.Attribute)
			if !ok {
				return decider.Answer{}, false, nil
			}
			if !found {
				val = "null"
			}
			if equal(val, c.Value) {
				reason = c.Reason
			}
		}
	}
	if reason == "" {
		g, err := v.Grant(f[0], f[1], f[2], f[3], f[4], tenant)
		if err != nil {
			return decider.Answer{}, false, err
		}
		if g != "" {
			return decider.Answer{Allowed: true, Reason: g}, true, nil
		}
		reason = "no_grant"
	}
	return decider.Answer{Reason: reason}, true, nil
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
		s, ok := jsonscan.Unquoted(v)
		return ok && s == c
	}
	return false
}

// conditioned reports whether a condition of the table applies to action
// on a resource of type typ.
func (d *defaultDecider) conditioned(typ, action string) bool {
	for _, c := range d.table.Conditions {
		if c.AppliesTo(typ, action) {
			return true
		}
	}
	return false
}

// EnvoyKey appends what Envoy reads of a request: the headers it reads
// are the subject and tenant headers alone.
func (d *defaultDecider) EnvoyKey(dst []byte, r *decider.Request) []byte {
	dst = appendKeyString(dst, r.Method)
	dst = binary.AppendUvarint(dst, uint64(len(r.Path)))
	for _, seg := range r.Path {
		dst = appendKeyString(dst, seg)
	}
	for _, h := range [2]string{d.subjectHeader, d.tenantHeader} {
		v, ok := r.Headers[h]
		switch {
		case h == "" || !ok:
			dst = append(dst, 0)
		default:
			dst = appendKeyString(append(dst, 1), v)
		}
	}
	if r.JWT == nil {
		return append(dst, 0)
	}
	return appendKeyString(append(dst, 1), string(r.JWT))
}

// AuthzKey appends what Authz reads of a check.
func (d *defaultDecider) AuthzKey(dst []byte, c *decider.Check) []byte {
	for _, s := range c.Fields {
		dst = appendKeyString(dst, s)
	}
	if c.TenantAttribute {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendKeyString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// Eval appends the result of entrypoint for an input document.
func (d *defaultDecider) Eval(ctx context.Context, entrypoint string, input, dst []byte) ([]byte, bool) {
	switch {
	case entrypoint == EnvoyEntrypoint && d.envoy:
		return d.envoyDoc(ctx, input, dst)
	case entrypoint == AuthzEntrypoint && d.authzEP:
		return d.authzDoc(ctx, input, dst)
	}
	return dst, false
}

// envoyDoc appends the result of nexus/envoy/result for the
// opa-envoy-plugin input document input.
func (d *defaultDecider) envoyDoc(ctx context.Context, input, dst []byte) ([]byte, bool) {
	in := unsafe.String(unsafe.SliceData(input), len(input))
	top, ok := jsonscan.Members(in, "attributes", "parsed_path")
	if !ok {
		return dst, false
	}
	path := top[1]
	if path == "" {
		return dst, false // no parsed_path: the policy is undefined
	}
	attrs, ok := jsonscan.Members(top[0], "request", "metadataContext")
	if !ok {
		return dst, false
	}
	http, ok := jsonscan.Members(attrs[0], "http")
	if !ok {
		return dst, false
	}
	fields, ok := jsonscan.Members(http[0], "method", "headers")
	if !ok {
		return dst, false
	}
	var method, tenant string
	if fields[0] != "" {
		if method, ok = jsonscan.Unquoted(fields[0]); !ok {
			return dst, false
		}
	}
	headers, ok := jsonscan.Members(fields[1], d.subjectHeader, d.tenantHeader)
	if !ok {
		return dst, false
	}
	header := "null"
	if d.subjectHeader != "" && headers[0] != "" {
		header = headers[0]
	}
	if d.tenantHeader != "" && headers[1] != "" {
		if tenant, ok = jsonscan.Unquoted(headers[1]); !ok {
			return dst, false
		}
	}
	jwt, found, ok := jsonscan.Lookup(attrs[1], "filterMetadata", "envoy.filters.http.jwt_authn")
	if !ok {
		return dst, false
	}
	if !found {
		jwt = "null"
	}
	sc := jsonscan.NewScanner(path)
	if !sc.Next('[') {
		return dst, false
	}
	// The path's segments stay on the stack.
	var segs [8]string
	segPath := segs[:0]
	for first := true; !sc.Next(']'); first = false {
		if !first && !sc.Next(',') {
			return dst, false
		}
		seg, ok := sc.Str()
		if !ok {
			return dst, false
		}
		segPath = append(segPath, seg)
	}
	req := builtins.NewEnvoyRequest(method, tenant)
	if !sc.Done() || req.Identify(jwt, header) != nil {
		return dst, false
	}
	var a decider.Answer
	err := builtins.Read(ctx, d.store, func(v builtins.View) (err error) {
		a, err = v.EnvoyDecide(d.table, &req, segPath)
		return err
	})
	if err != nil {
		return dst, false
	}
	return a.AppendJSON(dst), true
}

// authzDoc appends the result of nexus/authz/decision for the
// application check input ({"subject", "action", "resource", ...}).
func (d *defaultDecider) authzDoc(ctx context.Context, input, dst []byte) ([]byte, bool) {
	if !d.authz {
		return dst, false
	}
	in := unsafe.String(unsafe.SliceData(input), len(input))
	top, ok := jsonscan.Members(in, "subject", "action", "resource")
	if !ok {
		return dst, false
	}
	subj, ok1 := jsonscan.Members(top[0], "type", "id")
	resource, ok2 := jsonscan.Members(top[2], "type", "id", "tenant", "attributes")
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
		if f[i], ok = jsonscan.Unquoted(raw); !ok {
			return dst, false
		}
	}
	attrs := resource[3]
	if attrs != "" && !jsonscan.IsObject(attrs) {
		return dst, false
	}
	a, ok := d.authzAnswer(ctx, &f, attrs)
	if !ok {
		return dst, false
	}
	return a.AppendJSON(dst), true
}
