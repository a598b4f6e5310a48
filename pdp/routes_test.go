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
	type match struct {
		m  pdp.RouteMatch
		ok bool
	}
	// probe is what the loaded rules make of a few requests.
	probe := func() []match {
		var ms []match
		for _, r := range []struct {
			method string
			segs   []string
		}{
			{"GET", []string{"tenants", "acme", "files", "f1"}},
			{"DELETE", []string{"b", "f2"}},
			{"GET", []string{"a"}},
		} {
			m, ok := p.MatchRoute(r.method, r.segs)
			ms = append(ms, match{m, ok})
		}
		return ms
	}
	if got := probe()[0]; got != (match{pdp.RouteMatch{Action: "read", Type: "file", ID: "f1", Tenant: "acme"}, true}) {
		t.Fatalf("default routes: %+v", got)
	}
	tests := []struct {
		name string
		data string
		want []match
	}{
		{"none", `{}`, []match{{}, {}, {}}},
		{"in-order", `{"nexus":{"routes":[{"method":"*","path":"/b/{id}","action":"read","type":"file","extra":1},{"method":"DELETE","path":"/b/{id}","action":"delete","type":"file"}]}}`,
			[]match{{}, {pdp.RouteMatch{Action: "read", Type: "file", ID: "f2"}, true}, {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := p.Load(ctx, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: []byte(tt.data)}); err != nil {
				t.Fatal(err)
			}
			if got := probe(); !slices.Equal(got, tt.want) {
				t.Fatalf("matches %+v, want %+v", got, tt.want)
			}
		})
	}
	if err := p.Load(ctx, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: []byte(`{"nexus":{"routes":[{"method":"GET","path":"/a","action":"list","type":"folder"}]}}`)}); err != nil {
		t.Fatal(err)
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
			err := p.Load(ctx, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: []byte(data)})
			if !errors.Is(err, pdp.ErrBadPolicyData) {
				t.Fatalf("load = %v, want ErrBadPolicyData", err)
			}
			if got := probe()[2]; got != (match{pdp.RouteMatch{Action: "list", Type: "folder"}, true}) {
				t.Fatalf("rules after a refused load match %+v, want the previous rules'", got)
			}
		})
	}
}
