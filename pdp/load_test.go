package pdp

import (
	"context"
	"errors"
	"testing"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp/internal/input"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
)

func newTestPDP(t *testing.T) *PDP {
	t.Helper()
	store := fixture.DemoStore(t)
	p, err := New(context.Background(), Config{Engine: fixture.StoreEngine(t, store), Store: store, Policy: fixture.Bundle(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// TestPolicyLoadDuringDecision: an input pruned for a policy that was
// replaced before the decision is built again for the new one, whether
// it is written as JSON (for the decision cache) or as values (the cache
// off).
func TestPolicyLoadDuringDecision(t *testing.T) {
	ctx := context.Background()
	req := fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})
	for _, values := range []bool{false, true} {
		p := newTestPDP(t)
		if values {
			p.cache = nil
		}
		builds := 0
		reload := func() error {
			builds++
			if builds == 1 {
				return p.Load(ctx, nil)
			}
			return nil
		}
		d, err := p.decideBuilt(ctx, IfaceGRPC, p.cfg.EnvoyEntrypoint, meta{}, true, func(dst []byte, w input.Writer, keep *prune.Tree) ([]byte, error) {
			if (w != nil) != values {
				t.Fatalf("the input was written as values %v, want %v", w != nil, values)
			}
			var err error
			if w != nil {
				err = input.WriteEnvoy(w, req, input.Options{Keep: keep})
			} else {
				dst, err = input.AppendEnvoy(dst, req, input.Options{Keep: keep})
			}
			if err == nil {
				err = reload()
			}
			return dst, err
		})
		if err != nil || !d.Allowed {
			t.Fatalf("values %v: decision = %v, %v; want allowed", values, d.Allowed, err)
		}
		if builds != 2 {
			t.Fatalf("values %v: input built %d times, want 2 (again after the load)", values, builds)
		}
	}
}

// TestLoadRefusesMissingEntrypoint: a bundle without an entrypoint the
// PDP is configured to evaluate is refused with a precise error, and the
// previous policy keeps deciding.
func TestLoadRefusesMissingEntrypoint(t *testing.T) {
	p := newTestPDP(t)
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules:     map[string]string{"p.rego": "package other\nimport rego.v1\nallow := true\n"},
		Entrypoints: []string{"other/allow"}, Revision: "other",
	})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Load(ctx, b)
	if !errors.Is(err, ErrNoEntrypoint) {
		t.Fatalf("Load = %v, want ErrNoEntrypoint", err)
	}
	if got := p.PolicyRevision(); got != "test" {
		t.Fatalf("policy revision after a refused load = %q, want the previous %q", got, "test")
	}
	d, err := p.Envoy(ctx, IfaceGRPC, fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"}))
	if err != nil || !d.Allowed {
		t.Fatalf("decision after a refused load = %v, %v; want allowed by the previous policy", d.Allowed, err)
	}
	// The same bundle loads where its entrypoint is the one configured
	// and the other family of checks is disabled.
	store := fixture.DemoStore(t)
	q, err := New(ctx, Config{Engine: fixture.StoreEngine(t, store), Store: store, Policy: b, EnvoyEntrypoint: "other/allow", AuthzEntrypoint: Disabled})
	if err != nil {
		t.Fatalf("New with the bundle's entrypoint: %v", err)
	}
	defer q.Close(ctx)
	if _, err := q.Check(ctx, IfaceAuthZEN, &Check{Subject: Subject{Type: "user", ID: "a"}, Action: "read", Resource: Resource{Type: "file"}}); !errors.Is(err, ErrNotReady) {
		t.Fatalf("a disabled check = %v, want ErrNotReady", err)
	}
}
