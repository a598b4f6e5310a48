package pdp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// FuzzDefaultPolicyNative: whatever the input document, the default
// policy's native evaluation either defers to the Wasm or answers what the
// Wasm answers (the same JSON value); it never answers where the Wasm
// fails or is undefined. The seeds are the documents the server writes
// for proxied requests and application checks; the fuzzer mutates them
// into any JSON (repeated keys, escapes, other types) or none.
func FuzzDefaultPolicyNative(f *testing.F) {
	ctx := context.Background()
	store := fixture.DemoStore(f)
	b := fixture.Bundle(f)
	p, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(f, store), Store: store, Relations: store, Deciders: fixture.Deciders(store), Policy: b, CacheDisabled: true})
	if err != nil {
		f.Fatal(err)
	}
	if !p.Native() {
		f.Fatal("the PDP does not recognise the default policy")
	}
	sc, err := store.Schema(ctx)
	if err != nil {
		f.Fatal(err)
	}
	data, err := pdp.PolicyData(b.Data, sc)
	if err != nil {
		f.Fatal(err)
	}
	eng := fixture.LoadedEngine(f, store, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: data})
	for _, s := range []string{
		`{"attributes":{"request":{"http":{"method":"GET","headers":{"x-user":"alice","x-tenant":"acme"}}}},"parsed_path":["tenants","acme","files","report.pdf"]}`,
		`{"attributes":{"request":{"http":{"method":"GET","headers":{"x-user":"bob"}}}},"parsed_path":["files","report.pdf"]}`,
		`{"attributes":{"request":{"http":{"method":"DELETE","headers":{"x-user":"alice"}}},"metadataContext":{"filterMetadata":{"envoy.filters.http.jwt_authn":{"p":{"sub":"carol"}}}}},"parsed_path":["files","report.pdf"]}`,
		`{"attributes":{"request":{"http":{"method":"GET","headers":{"x-user":"a\u0062c","x-tenant":"acme"}}}},"parsed_path":["tenants","ac\u006de","files","r"]}`,
		`{"subject":{"type":"user","id":"alice"},"action":"read","resource":{"type":"file","id":"report.pdf","tenant":"acme"}}`,
		`{"subject":{"type":"user","id":"bob"},"action":"write","resource":{"type":"file","id":"report.pdf","attributes":{"locked":true}}}`,
		`{"subject":{"type":"user","id":"bob"},"action":"read","resource":{"type":"folder","id":"q3","attributes":{"locked":"yes"}},"context":{}}`,
		// Strings the policy joins into "type:id" and the builtins cut
		// again elsewhere: at the type's ':', at the ID's '#'.
		`{"subject":{"type":"user","id":"bob"},"action":"read","resource":{"type":"file:x","id":"report.pdf"}}`,
		`{"subject":{"type":"user","id":"bob"},"action":"read","resource":{"type":"file:report.pdf","id":""}}`,
		`{"subject":{"type":"group","id":"eng#member"},"action":"write","resource":{"type":"folder","id":"projects"}}`,
		`{"subject":{"type":"user:dave","id":""},"action":"write","resource":{"type":"folder","id":"projects"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) || !utf8.ValidString(in) {
			return // the server writes JSON, in UTF-8
		}
		for _, ep := range []string{policy.EnvoyEntrypoint, policy.AuthzEntrypoint} {
			out, ok := p.EvalNative(ctx, ep, []byte(in))
			if !ok {
				continue
			}
			want, err := eng.Eval(ctx, ep, []byte(in), nil)
			if errors.Is(err, engine.ErrUndefined) || err != nil {
				t.Fatalf("%s: the native evaluation answers %s where the Wasm fails (%v)\ninput: %s", ep, out, err, in)
			}
			if !sameJSON(t, out, want) {
				t.Fatalf("%s: the native evaluation answers %s, the Wasm %s\ninput: %s", ep, out, want, in)
			}
		}
	})
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

// FuzzEnvoyFields: a proxied request (an Envoy CheckRequest, and the same
// request through forward auth) decided natively from its fields, without
// its input document, gets the Wasm's decision on the document
// (the same decision, or both fail with the same code). The fuzzer varies
// what the default policy reads: the method, the path (escapes, a query,
// repeated slashes), the subject and tenant headers (absent, empty, not an
// ID) and the JWT payloads Envoy verified (none, one or two subjects, a
// subject that is not a string).
func FuzzEnvoyFields(f *testing.F) {
	ctx := context.Background()
	store := fixture.DemoStore(f)
	b := withNexusData(f, fixture.Bundle(f), "subject_header", "x-user")
	native := newPDP(f, store, b, true, false)
	wasm := newPDP(f, store, b, false, false)
	cached := newPDP(f, store, b, true, true)
	if !native.Native() || wasm.Native() {
		f.Fatal("want one PDP deciding natively and one in the Wasm")
	}
	f.Add("GET", "/tenants/acme/files/report.pdf", true, "alice", true, "acme", 0, "")
	f.Add("GET", "/files/report.pdf", true, "bob", false, "", 0, "")
	f.Add("DELETE", "/files/report.pdf?x=1", true, "alice", false, "", 1, "carol")
	f.Add("GET", "//tenants/acme/files/r%65port.pdf", false, "", true, "acme", 2, "carol")
	f.Add("PUT", "/files/report.pdf", true, "", true, "", 3, "")
	f.Add("GET", "/folders/q3/", true, "a b", true, "ac/me", 1, "")
	f.Add("", "/files/../report.pdf", true, "bob", false, "", 0, "")
	f.Add("GET", "/files/%zz", true, "bob", false, "", 0, "")
	f.Add("GET", "/files/report.pdf", true, "alice", true, "acme", 0, "")
	f.Add("GET", "/files/report.pdf", true, "alice", true, "globex", 0, "")
	f.Add("GET", "/files/report.pdf", true, "alice", true, "", 0, "")
	f.Add("GET", "/files/report.pdf", true, "", false, "", 0, "")
	f.Add("GET", "/files/report.pdf", true, "mallory", true, "acme", 1, "alice")
	f.Fuzz(func(t *testing.T, method, path string, hasUser bool, user string, hasTenant bool, tenant string, jwtShape int, sub string) {
		headers := map[string]string{"user-agent": "curl/8.0"}
		if hasUser {
			headers["x-user"] = user
		}
		if hasTenant {
			headers["x-tenant"] = tenant
		}
		req := fixture.EnvoyRequest(method, path, headers)
		req.Attributes.Request.Http.Headers = headers
		payload := func(sub *structpb.Value) *structpb.Value {
			// Built by hand: structpb.NewStruct refuses a string that is
			// not UTF-8, which building the document must refuse too.
			return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"sub": sub, "iss": structpb.NewStringValue("https://issuer")}})
		}
		var jwt *structpb.Struct
		switch s := structpb.NewStringValue(sub); jwtShape % 4 {
		case 1: // one payload
			jwt = &structpb.Struct{Fields: map[string]*structpb.Value{"payload": payload(s)}}
		case 2: // two payloads, the same subject
			jwt = &structpb.Struct{Fields: map[string]*structpb.Value{"a": payload(s), "b": payload(s)}}
		case 3: // two subjects, or one that is not a string
			jwt = &structpb.Struct{Fields: map[string]*structpb.Value{"a": payload(s), "b": payload(structpb.NewNumberValue(42))}}
		}
		if jwt != nil {
			req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": jwt}}
		}
		got, gerr, ok := native.EnvoyFieldsPath(ctx, req)
		if !ok {
			return // the caller writes the document and decides on it
		}
		want, werr := wasm.Envoy(ctx, pdp.IfaceGRPC, req)
		sameDecision(t, "from the fields", got, gerr, want, werr, req)
		sameCached(t, ctx, cached, req, want, werr)
		// The same request through forward auth (no JWT metadata there).
		hreq := &pdp.HTTPRequest{Method: method, Path: path, Headers: headers, Host: "drive.example.com", Scheme: "https", Protocol: "HTTP/1.1"}
		got, gerr, ok = native.HTTPFieldsPath(ctx, hreq, "10.1.2.3:40000")
		if !ok {
			return
		}
		want, werr = wasm.HTTP(ctx, pdp.IfaceHTTP, hreq, "10.1.2.3:40000")
		sameDecision(t, "forward auth, from the fields", got, gerr, want, werr, hreq)
	})
}

// TestEnvoyFieldsDecides: the field path decides the requests a proxy
// sends and the checks an application sends (it does not defer them all
// to the document path), cache on or off, and not when a decision sink
// takes the document.
func TestEnvoyFieldsDecides(t *testing.T) {
	ctx := context.Background()
	store := fixture.DemoStore(t)
	b := fixture.Bundle(t)
	b = withNexusData(t, b, "subject_header", "x-user")
	req := fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})
	for _, tc := range []struct {
		name  string
		cache bool
		sink  pdp.DecisionSink
		want  bool
	}{{"cache off", false, nil, true}, {"cache on", true, nil, true}, {"decision sink", true, discardSink{}, false}} {
		p, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(t, store), Store: store, Relations: store, Deciders: fixture.Deciders(store), Policy: b, CacheDisabled: !tc.cache, DecisionSink: tc.sink})
		if err != nil {
			t.Fatal(err)
		}
		d, err, ok := p.EnvoyFieldsPath(ctx, req)
		if ok != tc.want {
			t.Fatalf("%s: decided from the fields: %v, want %v", tc.name, ok, tc.want)
		}
		if ok && (err != nil || !d.Allowed || d.Reason != "rbac") {
			t.Fatalf("%s: %+v, %v; want an RBAC allow", tc.name, d, err)
		}
		hreq := &pdp.HTTPRequest{Method: "GET", Path: "/tenants/acme/files/report.pdf", Headers: map[string]string{"x-user": "alice"}}
		d, err, ok = p.HTTPFieldsPath(ctx, hreq, "10.1.2.3:40000")
		if ok != tc.want {
			t.Fatalf("%s, forward auth: decided from the fields: %v, want %v", tc.name, ok, tc.want)
		}
		if ok && (err != nil || !d.Allowed || d.Reason != "rbac") {
			t.Fatalf("%s, forward auth: %+v, %v; want an RBAC allow", tc.name, d, err)
		}
		c := &pdp.Check{Subject: pdp.Subject{Type: "user", ID: "alice"}, Action: "read", Resource: pdp.Resource{Type: "file", ID: "report.pdf", Tenant: "acme"}}
		d, err, ok = p.CheckFieldsPath(ctx, c)
		if ok != tc.want {
			t.Fatalf("%s, application check: decided from the fields: %v, want %v", tc.name, ok, tc.want)
		}
		if ok && (err != nil || !d.Allowed || d.Reason != "rbac") {
			t.Fatalf("%s, application check: %+v, %v; want an RBAC allow", tc.name, d, err)
		}
		c.Resource.Attributes = map[string]any{"locked": true}
		if _, _, ok := p.CheckFieldsPath(ctx, c); ok {
			t.Fatalf("%s: a check with attributes was decided from its fields", tc.name)
		}
	}
}

// withNexusData is b with data.nexus[key] set to value, as nexus serve
// --trusted-subject-header sets subject_header.
func withNexusData(tb testing.TB, b *bundle.Bundle, key string, value any) *bundle.Bundle {
	tb.Helper()
	var data map[string]any
	if err := json.Unmarshal(b.Data, &data); err != nil {
		tb.Fatal(err)
	}
	nx, _ := data["nexus"].(map[string]any)
	if nx == nil {
		nx = map[string]any{}
		data["nexus"] = nx
	}
	nx[key] = value
	raw, err := json.Marshal(data)
	if err != nil {
		tb.Fatal(err)
	}
	nb := *b
	nb.Data = raw
	return &nb
}

// FuzzCheckFields: an application check decided natively from its fields,
// without its input document, gets the Wasm's decision on the document.
// The fuzzer varies every field the default policy reads: the subject,
// the action, the resource, the tenant the check claims and the
// resource's attributes (none, the tenant as AuthZEN's properties carry
// it, another tenant, the tenant and another attribute). It runs with the
// default policy and with one whose condition reads the tenant
// attribute.
func FuzzCheckFields(f *testing.F) {
	ctx := context.Background()
	store := fixture.DemoStore(f)
	type pdps struct{ native, wasm, cached *pdp.PDP }
	var policies []pdps
	for _, b := range []*bundle.Bundle{fixture.Bundle(f), withNexusData(f, fixture.Bundle(f), "conditions", []any{map[string]any{
		"type": "file", "actions": []string{"read", "write"}, "attribute": "tenant", "value": "globex", "reason": "embargo",
	}})} {
		policies = append(policies, pdps{newPDP(f, store, b, true, false), newPDP(f, store, b, false, false), newPDP(f, store, b, true, true)})
	}
	for _, s := range []struct {
		subType, subID, action, resType, resID, tenant string
		attrs                                          byte
	}{
		{"user", "alice", "read", "file", "report.pdf", "acme", 0},
		{"user", "alice", "read", "file", "report.pdf", "acme", 1},
		{"user", "alice", "read", "file", "report.pdf", "", 1},
		{"user", "alice", "read", "file", "report.pdf", "globex", 1},
		{"user", "alice", "read", "file", "report.pdf", "acme", 2},
		{"user", "alice", "write", "file", "report.pdf", "acme", 3},
		{"user", "bob", "read", "file", "report.pdf", "", 0},
		{"user", "bob", "write", "file", "report.pdf", "globex", 0},
		{"user", "carol", "delete", "folder", "q3", "acme", 1},
		{"group", "eng#member", "read", "file", "report.pdf", "", 0},
		{"user", "", "read", "file", "", "acme", 0},
		{"user", "a b", "read", "tenant", "acme", "acme", 1},
		{"user", "alice", "manage", "tenant", "acme", "", 0},
	} {
		f.Add(s.subType, s.subID, s.action, s.resType, s.resID, s.tenant, s.attrs)
	}
	f.Fuzz(func(t *testing.T, subType, subID, action, resType, resID, tenant string, attrs byte) {
		c := &pdp.Check{Subject: pdp.Subject{Type: subType, ID: subID}, Action: action, Resource: pdp.Resource{Type: resType, ID: resID, Tenant: tenant}}
		switch attrs % 4 {
		case 1:
			c.Resource.Attributes = map[string]any{"tenant": tenant}
		case 2:
			c.Resource.Attributes = map[string]any{"tenant": tenant + "x"}
		case 3:
			c.Resource.Attributes = map[string]any{"tenant": tenant, "locked": true}
		}
		for n, p := range policies {
			if !p.native.KnownType(subType) || !p.native.KnownType(resType) {
				return // Check refuses the check before either path
			}
			got, gerr, ok := p.native.CheckFieldsPath(ctx, c)
			if attrs%4 >= 2 && ok {
				t.Fatalf("policy %d: decided from the fields with attributes %v", n, c.Resource.Attributes)
			}
			if !ok {
				continue // the caller writes the document and decides on it
			}
			want, werr := p.wasm.Check(ctx, pdp.IfacePermit, c)
			sameDecision(t, fmt.Sprintf("policy %d, from the fields", n), got, gerr, want, werr, c)
			// With the cache on, a miss and then a hit, keyed by the fields.
			for i := range 2 {
				d, err, ok := p.cached.CheckFieldsPath(ctx, c)
				if !ok {
					t.Fatalf("policy %d, cached, call %d: not decided from the fields", n, i)
				}
				sameDecision(t, fmt.Sprintf("policy %d, cached, call %d (%s)", n, i, d.Cache), d, err, want, werr, c)
			}
		}
	})
}

// TestCheckFieldsTenantAttribute: a check whose resource attributes are
// its tenant alone (AuthZEN's resource.properties.tenant) is decided from
// its fields, and a condition on that attribute holds there as on the
// document; other attributes send the check to the document.
func TestCheckFieldsTenantAttribute(t *testing.T) {
	ctx := context.Background()
	store := fixture.DemoStore(t)
	b := withNexusData(t, fixture.Bundle(t), "conditions", []any{map[string]any{
		"type": "file", "actions": []string{"read"}, "attribute": "tenant", "value": "acme", "reason": "embargo",
	}})
	native, wasm := newPDP(t, store, b, true, false), newPDP(t, store, b, false, false)
	for _, tc := range []struct {
		tenant string
		attrs  map[string]any
		fields bool
		reason string
	}{
		{"acme", map[string]any{"tenant": "acme"}, true, "embargo"},
		{"acme", nil, true, "rbac"},
		{"globex", map[string]any{"tenant": "globex"}, true, "tenant_mismatch"},
		{"acme", map[string]any{"tenant": "globex"}, false, ""},
		{"acme", map[string]any{"tenant": "acme", "locked": false}, false, ""},
	} {
		c := &pdp.Check{Subject: pdp.Subject{Type: "user", ID: "alice"}, Action: "read",
			Resource: pdp.Resource{Type: "file", ID: "report.pdf", Tenant: tc.tenant, Attributes: tc.attrs}}
		d, err, ok := native.CheckFieldsPath(ctx, c)
		if ok != tc.fields {
			t.Fatalf("%+v: decided from the fields: %v, want %v", c.Resource, ok, tc.fields)
		}
		want, werr := wasm.Check(ctx, pdp.IfacePermit, c)
		if !ok {
			continue
		}
		sameDecision(t, "from the fields", d, err, want, werr, c)
		if d.Reason != tc.reason {
			t.Fatalf("%+v: reason %q, want %q", c.Resource, d.Reason, tc.reason)
		}
	}
}

// sameCached asks a caching PDP for req twice (a miss, then a hit on the
// key of the fields the decision reads) and holds both answers to the
// Wasm's want.
func sameCached(t *testing.T, ctx context.Context, p *pdp.PDP, req *authv3.CheckRequest, want pdp.Decision, werr error) {
	t.Helper()
	for i := range 2 {
		d, err, ok := p.EnvoyFieldsPath(ctx, req)
		if !ok {
			t.Fatalf("cached, call %d: not decided from the fields", i)
		}
		sameDecision(t, fmt.Sprintf("cached, call %d (%s)", i, d.Cache), d, err, want, werr, req)
	}
}

// discardSink is a decision sink that drops every record.
type discardSink struct{}

func (discardSink) Record(*pdp.DecisionRecord) {}

// TestFieldsCacheKeys: requests that differ only where a careless key
// would run their fields together (path segments cut elsewhere, an empty
// header against an absent one, a subject in a header against one in a
// JWT) get their own decisions from a caching PDP, asked one right after
// the other.
func TestFieldsCacheKeys(t *testing.T) {
	ctx := context.Background()
	store := fixture.DemoStore(t)
	b := fixture.Bundle(t)
	wasm := newPDP(t, store, b, false, false)
	jwt := func(req *authv3.CheckRequest, sub string) *authv3.CheckRequest {
		req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": {Fields: map[string]*structpb.Value{
			"p": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"sub": structpb.NewStringValue(sub)}}),
		}}}}
		return req
	}
	for n, pair := range [][2]*authv3.CheckRequest{
		{fixture.EnvoyRequest("GET", "/filesr/eport.pdf", map[string]string{"x-user": "bob"}), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})},
		{fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": ""}), fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", nil)},
		{fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"}), jwt(fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"}), "mallory")},
		{fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob", "x-tenant": "acme"}), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob", "x-tenant": "globex"})},
		{fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "alice"}), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})},
	} {
		cached := newPDP(t, store, b, true, true)
		var answers [2]pdp.Decision
		for i, req := range pair {
			want, werr := wasm.Envoy(ctx, pdp.IfaceGRPC, req)
			if i == 1 && werr == nil && reflect.DeepEqual(want.Decision, answers[0].Decision) {
				t.Fatalf("pair %d decides the same twice (%+v): it tests no key", n, want.Decision)
			}
			answers[i] = want
			sameCached(t, ctx, cached, req, want, werr)
		}
	}
	checks := [][2]*pdp.Check{
		{{Subject: pdp.Subject{Type: "user", ID: "alice"}, Action: "read", Resource: pdp.Resource{Type: "file", ID: "report.pdf", Tenant: "acme"}},
			{Subject: pdp.Subject{Type: "user", ID: "alice"}, Action: "read", Resource: pdp.Resource{Type: "file", ID: "report.pdfacme"}}},
	}
	for _, pair := range checks {
		cached := newPDP(t, store, b, true, true)
		for _, c := range pair {
			want, werr := wasm.Check(ctx, pdp.IfacePermit, c)
			d, err, ok := cached.CheckFieldsPath(ctx, c)
			if !ok {
				t.Fatalf("%+v: not decided from the fields", c)
			}
			sameDecision(t, "cached", d, err, want, werr, c)
		}
	}
}

// newPDP is a PDP on store with the policy b, deciding the default policy
// natively if native (else in its Wasm), with the decision cache if
// cache.
func newPDP(tb testing.TB, store *datastore.BoltStore, b *bundle.Bundle, native, cache bool) *pdp.PDP {
	tb.Helper()
	cfg := pdp.Config{Engine: fixture.StoreEngine(tb, store), Store: store, Policy: b, CacheDisabled: !cache}
	if native {
		cfg.Relations, cfg.Deciders = store, fixture.Deciders(store)
	}
	p, err := pdp.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// sameDecision fails t unless got (and its error) is the Wasm's want: the
// same decision, or the same error code. what names the path, req the
// request.
func sameDecision(t *testing.T, what string, got pdp.Decision, gerr error, want pdp.Decision, werr error, req any) {
	t.Helper()
	if (gerr == nil) != (werr == nil) || pdp.Code(gerr) != pdp.Code(werr) {
		t.Fatalf("%s: %v; the Wasm: %v\nrequest: %+v", what, gerr, werr, req)
	}
	if gerr == nil && !reflect.DeepEqual(got.Decision, want.Decision) {
		t.Fatalf("%s: %+v\nthe Wasm: %+v\nrequest: %+v", what, got.Decision, want.Decision, req)
	}
}
