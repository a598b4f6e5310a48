package pdp_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// TestRoutes: the loaded policy's route rules, in data order, follow
// every load; data whose route rules are not well formed is refused with
// ErrBadPolicyData and the previous rules stay.
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
		{"extra-field", `{"nexus":{"routes":[{"method":"*","path":"/b/{id}","action":"read","type":"file","extra":1}]}}`,
			[]pdp.Route{{Method: "*", Path: "/b/{id}", Action: "read", Type: "file"}}},
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
	for name, data := range map[string]string{
		"no-action":      `{"nexus":{"routes":[{"method":"GET","path":"/a"}]}}`,
		"empty-method":   `{"nexus":{"routes":[{"method":"","path":"/a","action":"read","type":"file"}]}}`,
		"no-path":        `{"nexus":{"routes":[{"method":"GET","action":"read","type":"file"}]}}`,
		"not-an-object":  `{"nexus":{"routes":["x"]}}`,
		"not-a-list":     `{"nexus":{"routes":{"a":1}}}`,
		"bad-segments":   `{"nexus":{"routes":[{"method":"GET","segments":["a",1],"action":"read","type":"file"}]}}`,
		"two-ids":        `{"nexus":{"routes":[{"method":"GET","path":"/a/{id}/b/{id}","action":"read","type":"file"}]}}`,
		"two-tenants":    `{"nexus":{"routes":[{"method":"GET","path":"/{tenant}/{tenant}","action":"read","type":"file"}]}}`,
		"number-of-type": `{"nexus":{"routes":[{"method":"GET","path":"/a","action":"read","type":7}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			before := p.Routes()
			err := p.Load(ctx, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: []byte(data)})
			if !errors.Is(err, pdp.ErrBadPolicyData) {
				t.Fatalf("load = %v, want ErrBadPolicyData", err)
			}
			if got := p.Routes(); !slices.Equal(got, before) {
				t.Fatalf("routes after a refused load %+v, want %+v", got, before)
			}
		})
	}
}
