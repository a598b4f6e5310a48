package builtins_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	dsschema "github.com/nexuspdp/nexus/datastore/schema"
)

// writeTuples writes the tuples txt to s.
func writeTuples(t *testing.T, s *datastore.BoltStore, txt ...string) {
	t.Helper()
	var touches []api.Tuple
	for _, x := range txt {
		tu, err := api.ParseTuple(x)
		if err != nil {
			t.Fatal(err)
		}
		touches = append(touches, tu)
	}
	if _, err := s.Write(context.Background(), datastore.WriteRequest{Touches: touches}); err != nil {
		t.Fatal(err)
	}
}

// TestResourceTenantInherited: a resource without a tenant of its own is
// in the tenant of its nearest ancestors through the relations its
// type's tenancy inherits through, whatever the request claims; a walk
// through a cycle ends; a walk deeper than 32 levels is an error; a
// resource of a type that requires a tenant and has none is in none.
func TestResourceTenantInherited(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	writeTuples(t, s,
		"folder:groot#tenant@tenant:globex",
		"file:child.pdf#parent@folder:groot",
		"folder:sub#parent@folder:groot",
		"file:deep.pdf#parent@folder:sub",
		// Its own tenant wins over the folder's.
		"file:own.pdf#tenant@tenant:acme", "file:own.pdf#parent@folder:groot",
		// Two parents in two tenants: in both.
		"file:both.pdf#parent@folder:groot", "file:both.pdf#parent@folder:root",
		// A cycle without a tenant.
		"folder:c1#parent@folder:c2", "folder:c2#parent@folder:c1", "file:loop.pdf#parent@folder:c1",
		// A cycle below a tenant.
		"folder:d1#parent@folder:d2", "folder:d2#parent@folder:d1", "folder:d2#parent@folder:groot", "file:dloop.pdf#parent@folder:d1",
	)
	// A chain of 33 folders: its top one, 32 steps above the bottom
	// one, holds the tenant; one more makes it 33 steps.
	var chain []string
	for i := 0; i < 33; i++ {
		chain = append(chain, fmt.Sprintf("folder:n%d#parent@folder:n%d", i, i+1))
	}
	chain = append(chain, "folder:n32#tenant@tenant:globex", "folder:n33#tenant@tenant:globex")
	writeTuples(t, s, chain...)
	for _, tc := range []struct {
		object, claimed string
		want            string // the result, or "error"
	}{
		{"folder:groot", "acme", "mismatch"},
		{"file:child.pdf", "acme", "mismatch"},
		{"file:child.pdf", "globex", "ok,globex"},
		{"file:child.pdf", "", "ok,globex"},
		{"file:deep.pdf", "acme", "mismatch"},
		{"file:deep.pdf", "", "ok,globex"},
		{"file:own.pdf", "acme", "ok,acme"},
		{"file:own.pdf", "globex", "mismatch"},
		{"file:both.pdf", "acme", "ok,acme"},
		{"file:both.pdf", "globex", "ok,globex"},
		{"file:both.pdf", "", "ok,"},
		{"file:both.pdf", "initech", "mismatch"},
		{"file:loop.pdf", "acme", "none"},
		{"folder:c1", "", "none"},
		{"file:dloop.pdf", "acme", "mismatch"},
		{"file:dloop.pdf", "", "ok,globex"},
		{"file:SECRET.pdf", "acme", "none"}, // unknown to the store
		{"file", "acme", "ok,acme"},         // no ID: the type in the claimed tenant
		{"folder:n0", "acme", "mismatch"},   // n32 is 32 steps up
		{"folder:n1", "", "ok,globex"},
		{"folder:n", "acme", "none"},
	} {
		for name, st := range map[string]builtins.Store{"view": s, "per call": perCall{s}} {
			got, err := builtins.ResourceTenant(ctx, st, nil, tc.object, tc.claimed)
			g := strings.Join(got, ",")
			if err != nil {
				g = "error"
			}
			if g != tc.want {
				t.Errorf("%s: resource_tenant %+v = %q (%v), want %q", name, tc, g, err, tc.want)
			}
		}
	}
	// One more level: n33's tenant is 33 steps above the new bottom.
	writeTuples(t, s, "folder:m#parent@folder:n0")
	for name, st := range map[string]builtins.Store{"view": s, "per call": perCall{s}} {
		got, err := builtins.ResourceTenant(ctx, st, nil, "folder:m", "acme")
		if !errors.Is(err, builtins.ErrTenantDepth) || !errors.Is(err, datastore.ErrDepthExceeded) {
			t.Errorf("%s: resource_tenant folder:m = %v, %v; want ErrTenantDepth", name, got, err)
		}
	}
	// The default policy denies it, and the check on the inherited
	// wrong tenant.
	d := newDefaultPolicy(t, s, benchTable(), "x-user", "x-tenant")
	for _, tc := range []struct{ input, want string }{
		{`{"subject":{"type":"user","id":"alice"},"action":"delete","resource":{"type":"file","id":"child.pdf","tenant":"acme"}}`, `"reason":"tenant_mismatch"`},
		{`{"subject":{"type":"user","id":"alice"},"action":"delete","resource":{"type":"file","id":"SECRET.pdf","tenant":"acme"}}`, `"reason":"no_tenant"`},
		{`{"subject":{"type":"user","id":"alice"},"action":"delete","resource":{"type":"file","id":"report.pdf","tenant":"acme"}}`, `"reason":"rbac"`},
		{`{"attributes":{"request":{"http":{"method":"DELETE","headers":{"x-user":"alice"}}}},"parsed_path":["tenants","acme","files","child.pdf"]}`, `"reason":"tenant_mismatch"`},
		{`{"attributes":{"request":{"http":{"method":"DELETE","headers":{"x-user":"alice"}}}},"parsed_path":["tenants","acme","files","SECRET.pdf"]}`, `"reason":"no_tenant"`},
	} {
		var out []byte
		var ok bool
		if strings.HasPrefix(tc.input, `{"attributes"`) {
			out, ok = d.Envoy(ctx, []byte(tc.input), nil)
		} else {
			out, ok = d.Authz(ctx, []byte(tc.input), nil)
		}
		if !ok || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %s (%v), want %s", tc.input, out, ok, tc.want)
		}
	}
	in := `{"subject":{"type":"user","id":"alice"},"action":"delete","resource":{"type":"folder","id":"m","tenant":"acme"}}`
	if out, ok := d.Authz(ctx, []byte(in), nil); ok {
		t.Errorf("folder:m beyond the depth: answered %s, want an evaluation error", out)
	}
}

// TestResourceTenantNotRequired: a type whose tenancy does not require a
// tenant judges a resource the store does not hold in the claimed tenant
// (Permit-style RBAC on resources the store never heard of), and still
// inherits a tenant where it has a parent with one.
func TestResourceTenantNotRequired(t *testing.T) {
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "rel.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	schema := `types:
  user: {}
  tenant:
    relations:
      admin: [user]
  folder:
    relations:
      tenant: [tenant]
  doc:
    relations:
      tenant: [tenant]
      parent: [folder]
    tenancy: {inherit: [parent]}
roles:
  grants:
    admin: [doc:*]
`
	sc, err := dsschema.Parse([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	writeTuples(t, s, "tenant:acme#admin@user:alice", "folder:g#tenant@tenant:globex", "doc:in-g#parent@folder:g")
	d := newDefaultPolicy(t, s, benchTable(), "x-user", "x-tenant")
	for _, tc := range []struct{ id, want string }{
		{"anything", `"allow":true,"reason":"rbac"`},
		{"in-g", `"reason":"tenant_mismatch"`},
	} {
		in := `{"subject":{"type":"user","id":"alice"},"action":"read","resource":{"type":"doc","id":"` + tc.id + `","tenant":"acme"}}`
		out, ok := d.Authz(ctx, []byte(in), nil)
		if !ok || !strings.Contains(string(out), tc.want) {
			t.Errorf("doc:%s: %s (%v), want %s", tc.id, out, ok, tc.want)
		}
	}
}
