package builtins_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
)

// perCall hides that its store is a *datastore.BoltStore: a decision
// over it reads through the Store's methods, one call at a time.
type perCall struct{ *datastore.BoltStore }

// TestDefaultPolicyView: the default policy answers the same over a
// *datastore.BoltStore (one View per decision, the resource and the
// subject read together) as over its methods, for allowed and denied
// requests, tenants claimed, stored, missing or mismatched, userset
// tenants, and names and IDs that are not valid type names or IDs. The
// store also holds 4,000 tuples of files and folders of their own, before
// and after the others in key order: its indexes are trees read from
// their pages, not buckets small enough for bbolt to keep inline.
func TestDefaultPolicyView(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	var touches []api.Tuple
	for _, txt := range []string{
		"file:two.txt#tenant@tenant:acme", "file:two.txt#tenant@tenant:globex",
		"file:set.txt#tenant@tenant:acme", "tenant:globex#viewer@user:bob",
		"file:lone.txt#owner@user:carol",
	} {
		tu, err := api.ParseTuple(txt)
		if err != nil {
			t.Fatal(err)
		}
		touches = append(touches, tu)
	}
	for i := range 1000 {
		for _, p := range []string{"a", "z"} {
			u := api.Subject{Type: "user", ID: fmt.Sprintf("%su%d", p, i)}
			touches = append(touches,
				api.Tuple{Object: api.Object{Type: "file", ID: fmt.Sprintf("%sf%d", p, i)}, Relation: "owner", Subject: u},
				api.Tuple{Object: api.Object{Type: "folder", ID: fmt.Sprintf("%sd%d", p, i)}, Relation: "viewer", Subject: u})
		}
	}
	touches = append(touches, api.Tuple{Object: api.Object{Type: "file", ID: "zf7"}, Relation: "tenant", Subject: api.Subject{Type: "tenant", ID: "acme"}})
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: touches}); err != nil {
		t.Fatal(err)
	}
	table := benchTable()
	view := newDefaultPolicy(t, s, table, "x-user", "x-tenant")
	calls := newDefaultPolicy(t, perCall{s}, table, "x-user", "x-tenant")
	envoy := func(method, user, tenant string, path string) string {
		h := `"x-user":"` + user + `"`
		if tenant != "" {
			h += `,"x-tenant":"` + tenant + `"`
		}
		return `{"attributes":{"request":{"http":{"method":"` + method + `","headers":{` + h + `}}}},"parsed_path":` + path + `}`
	}
	authz := func(subType, subID, action, typ, id, tenant string) string {
		res := `"type":"` + typ + `"`
		if id != "-" {
			res += `,"id":"` + id + `"`
		}
		if tenant != "" {
			res += `,"tenant":"` + tenant + `"`
		}
		return `{"subject":{"type":"` + subType + `","id":"` + subID + `"},"action":"` + action + `","resource":{` + res + `}}`
	}
	var inputs []string
	for _, user := range []string{"alice", "bob", "carol", "erin", "nobody", "zu7", "au7"} {
		for _, tenant := range []string{"", "acme", "globex", "nope"} {
			for _, file := range []string{"report.pdf", "notes.txt", "two.txt", "set.txt", "lone.txt", "missing", "zf7", "af7"} {
				for _, method := range []string{"GET", "PUT", "DELETE"} {
					inputs = append(inputs,
						envoy(method, user, tenant, `["files","`+file+`"]`),
						envoy(method, user, "", `["tenants","`+tenant+`","files","`+file+`"]`))
				}
				for _, action := range []string{"read", "write", "delete", "view", "nope"} {
					inputs = append(inputs, authz("user", user, action, "file", file, tenant))
				}
			}
			inputs = append(inputs,
				envoy("GET", user, tenant, `["folders","q3"]`),
				authz("user", user, "read", "folder", "root", tenant),
				authz("user", user, "read", "file", "-", tenant),
				authz("user", user, "read", "file", "bad id", tenant),
				authz("user", user, "read", "File", "report.pdf", tenant),
				authz("user", user, "read", "file:x", "report.pdf", tenant),
				authz("User", user, "read", "file", "report.pdf", tenant),
				authz("user#member", user, "read", "file", "report.pdf", tenant),
				authz("user", user+":x", "read", "file", "report.pdf", tenant),
				authz("group", "eng#member", "read", "file", "report.pdf", tenant),
				authz("nope", user, "read", "file", "report.pdf", tenant),
			)
		}
		inputs = append(inputs, authz("user", user, "read", "file", "set.txt", "acme#member"))
	}
	for _, in := range inputs {
		for _, ep := range []string{"envoy", "authz"} {
			var got, want []byte
			var gok, wok bool
			if ep == "envoy" {
				got, gok = view.Envoy(ctx, []byte(in), nil)
				want, wok = calls.Envoy(ctx, []byte(in), nil)
			} else {
				got, gok = view.Authz(ctx, []byte(in), nil)
				want, wok = calls.Authz(ctx, []byte(in), nil)
			}
			if gok != wok || string(got) != string(want) {
				t.Errorf("%s %s:\nview      %v %s\nper call  %v %s", ep, in, gok, got, wok, want)
			}
		}
	}
}

// TestGrantAndTenantArguments: nexus.grant and nexus.resource_tenant
// read their string arguments the same over a store's View and over its
// methods: a subject that does not parse is an error once it is read
// (for the roles of a tenant, or for a check) and nothing before; a
// userset subject is one; an object ID the store cannot hold is an error
// only where the type has tenants to look up.
func TestGrantAndTenantArguments(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	const bad = "error"
	for _, tc := range []struct {
		subject, action, object, tenant string
		want                            string // the grant, "" for none, or bad
	}{
		{"user:alice", "read", "file:report.pdf", "acme", "rbac"},
		{"user:bob", "read", "file:report.pdf", "", "rebac"},
		{"user:bob", "read", "file:report.pdf", "acme", "rebac"},
		{"user:carol", "read", "file:report.pdf", "acme", ""},
		{"group:eng#member", "write", "folder:projects", "", "rebac"},
		{"user:bob", "read", "file", "", ""},             // no ID: no check
		{"user:bob", "nope", "file:report.pdf", "", ""},  // not a permission: no check
		{"bob", "read", "file", "", ""},                  // the subject is never read
		{"bob", "read", "file", "acme", bad},             // read for the roles
		{"bob", "read", "file:report.pdf", "", bad},      // read for the check
		{"user:b b", "read", "file:report.pdf", "", bad}, // read for the check
		{"user:bob#", "read", "file:report.pdf", "", bad},
		{"user:bob", "read", "file:re port", "", bad},
		{"user:bob", "read", "file:report.pdf", "a b", bad},
	} {
		for name, st := range map[string]builtins.Store{"view": s, "per call": perCall{s}} {
			got, err := builtins.Grant(ctx, st, nil, tc.subject, tc.action, tc.object, tc.tenant)
			g := strings.Join(got, ",")
			if err != nil {
				g = bad
				if !strings.HasPrefix(err.Error(), "nexus.grant: ") {
					t.Errorf("%s: grant %+v: error %q does not name the builtin", name, tc, err)
				}
				if tc.subject == "bob" && !strings.Contains(err.Error(), "want subject type:id") {
					t.Errorf("%s: grant %+v: error %q does not say the subject does not parse", name, tc, err)
				}
			}
			if g != tc.want {
				t.Errorf("%s: grant %+v = %q (%v), want %q", name, tc, g, err, tc.want)
			}
		}
	}
	for _, tc := range []struct {
		object, claimed string
		want            string // the result, or bad
	}{
		{"file:report.pdf", "", "ok,acme"},
		{"file:report.pdf", "acme", "ok,acme"},
		{"file:report.pdf", "globex", "mismatch"},
		{"file:unknown", "globex", "none"}, // files require a tenant
		{"file:unknown", "", "none"},
		{"file", "acme", "ok,acme"},
		{"user:bob", "", "ok,"},         // users have no tenant relation
		{"nope:x y", "acme", "ok,acme"}, // nor does an unknown type
		{"file:re port", "acme", bad},   // a tenanted type's ID is read
		{"file:a:b", "", bad},           // cut at the first ':'
		{"folder:root", "", "ok,acme"},
	} {
		for name, st := range map[string]builtins.Store{"view": s, "per call": perCall{s}} {
			got, err := builtins.ResourceTenant(ctx, st, nil, tc.object, tc.claimed)
			g := strings.Join(got, ",")
			if err != nil {
				g = bad
			}
			if g != tc.want {
				t.Errorf("%s: resource_tenant %+v = %q (%v), want %q", name, tc, g, err, tc.want)
			}
		}
	}
}
