package pdp_test

import (
	"context"
	"slices"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// TestRoutes: the loaded policy's route rules, in data order, follow
// every load; a rule that lacks a field is left out.
func TestRoutes(t *testing.T) {
	ts := newFixture(t)
	ctx := context.Background()
	b := fixture.Bundle(t)
	p, err := pdp.New(ctx, pdp.Config{Engine: fixture.StoreEngine(t, ts.store), Store: ts.store, Policy: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	rs := p.Routes()
	if len(rs) != 12 || rs[0] != (pdp.Route{Method: "GET", Path: "/tenants/{tenant}/files/{id}", Action: "read", Type: "file"}) {
		t.Fatalf("default routes: %d, first %+v", len(rs), rs)
	}
	tests := []struct {
		name string
		data string
		want []pdp.Route
	}{
		{"none", `{}`, nil},
		{"incomplete-left-out", `{"nexus":{"routes":[{"method":"GET","path":"/a"},{"method":"*","path":"/b/{id}","action":"read","type":"file","extra":1},"x"]}}`,
			[]pdp.Route{{Method: "*", Path: "/b/{id}", Action: "read", Type: "file"}}},
		{"not-a-list", `{"nexus":{"routes":{"a":1}}}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := p.Load(ctx, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: []byte(tt.data)}); err != nil {
				t.Fatal(err)
			}
			if got := p.Routes(); !slices.Equal(got, tt.want) {
				t.Fatalf("routes %+v, want %+v", got, tt.want)
			}
		})
	}
}
