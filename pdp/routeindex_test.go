package pdp_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/defaults/policy"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
	"github.com/nexuspdp/nexus/pdp/internal/input"
)

// TestRouteIndexSameDecisions: the default policy decides every request
// the same with the route index the server adds to its data and without
// it (every rule a candidate), including "*" methods and segments and
// rules that only their order tells apart.
func TestRouteIndexSameDecisions(t *testing.T) {
	ts := newFixture(t)
	ctx := context.Background()
	b, err := fixture.DefaultBundle()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b.Data, &doc); err != nil {
		t.Fatal(err)
	}
	nx := doc["nexus"].(map[string]any)
	nx["routes"] = append([]any{
		map[string]any{"method": "*", "path": "/admin/*", "action": "admin", "type": "tenant"},
		map[string]any{"method": "POST", "path": "/files/{id}", "action": "write", "type": "file"},
	}, append(nx["routes"].([]any),
		map[string]any{"method": "GET", "path": "/admin/{id}", "action": "read", "type": "tenant"},
		map[string]any{"method": "*", "path": "/files/{id}", "action": "delete", "type": "file"},
	)...)
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ts.store.Schema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	indexed, err := pdp.PolicyData(raw, sc)
	if err != nil {
		t.Fatal(err)
	}
	var idoc map[string]any
	if err := json.Unmarshal(indexed, &idoc); err != nil {
		t.Fatal(err)
	}
	if _, ok := idoc["nexus"].(map[string]any)["route_index"]; !ok {
		t.Fatal("the server's data has no route index")
	}
	delete(idoc["nexus"].(map[string]any), "route_index")
	plain, err := json.Marshal(idoc)
	if err != nil {
		t.Fatal(err)
	}
	eval := func(data []byte) func([]byte) string {
		eng := fixture.LoadedEngine(t, ts.store, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: data})
		return func(in []byte) string {
			out, err := eng.Eval(ctx, policy.EnvoyEntrypoint, in, nil)
			if err != nil {
				return "error: " + err.Error()
			}
			return string(out)
		}
	}
	withIndex, withoutIndex := eval(indexed), eval(plain)
	routes := map[string]int{}
	for _, method := range []string{"GET", "PUT", "DELETE", "POST", "PATCH"} {
		for _, path := range []string{"/tenants/acme/files/report.pdf", "/tenants/globex/files/report.pdf", "/tenants/acme/folders/q3", "/files/report.pdf", "/folders/q3", "/files", "/files/a/b", "/", "/tenants/acme/files", "/nowhere?x=1", "/admin/acme", "/admin"} {
			for _, user := range []string{"alice", "bob", "carol", ""} {
				hdr := map[string]string{}
				if user != "" {
					hdr["x-user"] = user
				}
				in, err := input.AppendEnvoy(nil, fixture.EnvoyRequest(method, path, hdr), input.Options{})
				if err != nil {
					t.Fatal(err)
				}
				a, p := withIndex(in), withoutIndex(in)
				if a != p {
					t.Fatalf("%s %s as %q: with the route index %s, without %s", method, path, user, a, p)
				}
				routes[a]++
				if testing.Verbose() {
					t.Logf("%s %s %s: %s", method, path, user, a)
				}
			}
		}
	}
	if len(routes) < 6 {
		t.Fatalf("only %d distinct results: the requests do not exercise the rules", len(routes))
	}
}
