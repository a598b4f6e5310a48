package pdp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/defaults/policy"
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
	p, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(f, store), Store: store, Relations: store, Policy: b, CacheDisabled: true})
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
