package builtins_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/types"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/defaults/demo"
	"github.com/nexuspdp/nexus/engine"
)

// examplePolicy uses every relationship builtin.
const examplePolicy = `package example

import rego.v1

subject := concat(":", ["user", input.user])

can_read if nexus.check(input.file, "read", subject)

is_admin if "admin" in nexus.roles(subject, "acme")

parents := nexus.relations(input.file, "parent")

readable := nexus.lookup_resources(subject, "read", "file")

readers := nexus.lookup_subjects(input.file, "read", "user")

result := {
	"can_read": can_read,
	"is_admin": is_admin,
	"parents": parents,
	"readable": readable,
	"readers": readers,
}

default can_read := false

default is_admin := false
`

func openDrive(t testing.TB) *datastore.BoltStore {
	t.Helper()
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "rel.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := demo.Load(ctx, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// oracle evaluates the policy with OPA's own evaluator, the builtins
// implemented as plain Go functions over the same store.
func oracle(t *testing.T, s *datastore.BoltStore, input map[string]any) any {
	t.Helper()
	ctx := context.Background()
	str := func(a *ast.Term) string { return string(a.Value.(ast.String)) }
	list := func(ss []string) *ast.Term {
		ts := make([]*ast.Term, len(ss))
		for i, x := range ss {
			ts[i] = ast.StringTerm(x)
		}
		return ast.ArrayTerm(ts...)
	}
	sub := func(x string) api.Subject { v, _ := api.ParseSubject(x); return v }
	obj := func(x string) api.Object { v, _ := api.ParseObject(x); return v }
	r := rego.New(
		rego.Query("data.example.result"),
		rego.Module("example.rego", examplePolicy),
		rego.Input(input),
		rego.Function3(&rego.Function{Name: "nexus.check", Decl: types.NewFunction(types.Args(types.S, types.S, types.S), types.B)},
			func(_ rego.BuiltinContext, a, b, c *ast.Term) (*ast.Term, error) {
				res, err := s.Check(ctx, datastore.CheckRequest{Object: obj(str(a)), Permission: str(b), Subject: sub(str(c))})
				return ast.BooleanTerm(res.Allowed), err
			}),
		rego.Function2(&rego.Function{Name: "nexus.roles", Decl: types.NewFunction(types.Args(types.S, types.S), types.NewArray(nil, types.S))},
			func(_ rego.BuiltinContext, a, b *ast.Term) (*ast.Term, error) {
				rs, err := s.AppendRoles(ctx, nil, sub(str(a)), str(b))
				return list(rs), err
			}),
		rego.Function2(&rego.Function{Name: "nexus.relations", Decl: types.NewFunction(types.Args(types.S, types.S), types.NewArray(nil, types.S))},
			func(_ rego.BuiltinContext, a, b *ast.Term) (*ast.Term, error) {
				o := obj(str(a))
				ts, err := s.Read(ctx, datastore.Filter{ObjectType: o.Type, ObjectID: o.ID, Relation: str(b)})
				var out []string
				for _, t := range ts {
					out = append(out, t.Subject.String())
				}
				return list(out), err
			}),
		rego.Function3(&rego.Function{Name: "nexus.lookup_resources", Decl: types.NewFunction(types.Args(types.S, types.S, types.S), types.NewArray(nil, types.S))},
			func(_ rego.BuiltinContext, a, b, c *ast.Term) (*ast.Term, error) {
				ids, err := s.LookupResources(ctx, sub(str(a)), str(b), str(c))
				return list(ids), err
			}),
		rego.Function3(&rego.Function{Name: "nexus.lookup_subjects", Decl: types.NewFunction(types.Args(types.S, types.S, types.S), types.NewArray(nil, types.S))},
			func(_ rego.BuiltinContext, a, b, c *ast.Term) (*ast.Term, error) {
				ids, err := s.LookupSubjects(ctx, obj(str(a)), str(b), str(c))
				return list(ids), err
			}),
	)
	rs, err := r.Eval(ctx)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	if len(rs) != 1 {
		t.Fatalf("oracle: %d results", len(rs))
	}
	return rs[0].Expressions[0].Value
}

func TestBuiltinsThroughEngine(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	e := newEngine(t, s, "example.rego", examplePolicy, "example/result")
	tests := []struct {
		name        string
		user, file  string
		wantCanRead bool
		wantAdmin   bool
	}{
		{"rebac-three-levels-up", "bob", "file:report.pdf", true, false},
		{"rbac-admin-owner", "alice", "file:report.pdf", true, true},
		{"group-of-group-editor", "frank", "file:report.pdf", true, false},
		{"nothing", "carol", "file:report.pdf", false, false},
		{"direct-viewer", "erin", "file:notes.txt", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			input := map[string]any{"user": tt.user, "file": tt.file}
			in, _ := json.Marshal(input)
			out, err := e.Eval(ctx, "example/result", in, nil)
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got["can_read"] != tt.wantCanRead || got["is_admin"] != tt.wantAdmin {
				t.Fatalf("got %s, want can_read=%v is_admin=%v", out, tt.wantCanRead, tt.wantAdmin)
			}
			want := oracle(t, s, input)
			wantJSON, _ := json.Marshal(want)
			var wantNorm any
			_ = json.Unmarshal(wantJSON, &wantNorm)
			if g, w := mustJSON(got), mustJSON(wantNorm); g != w {
				t.Fatalf("engine and OPA differ\nengine: %s\nOPA:    %s", g, w)
			}
		})
	}
}

func TestBuiltinErrorFailsClosed(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	e := newEngine(t, s, "p.rego", "package p\nimport rego.v1\nallow if nexus.check(input.o, input.p, input.s)\n", "p/allow")
	for _, in := range []string{
		`{"o":"file:report.pdf","p":"no_such_permission","s":"user:bob"}`,
		`{"o":"not-an-object","p":"read","s":"user:bob"}`,
	} {
		out, err := e.Eval(ctx, "p/allow", []byte(in), nil)
		if err == nil {
			t.Fatalf("%s: got %s, want an error", in, out)
		}
	}
}

// newEngine compiles one module and loads it into an engine whose registry
// holds the relationship builtins over s.
func newEngine(t *testing.T, s *datastore.BoltStore, file, module, entrypoint string) *engine.Engine {
	t.Helper()
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{Modules: map[string]string{file: module}, Entrypoints: []string{entrypoint}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := builtins.NewEngine(ctx, s, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	if err := e.Load(ctx, b); err != nil {
		t.Fatal(err)
	}
	return e
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestValidIDs(t *testing.T) {
	tests := []struct {
		name    string
		a, b, c string
		want    bool
	}{
		{"all-valid", "bob", "acme", "report.pdf", true},
		{"empty-is-valid", "bob", "", "", true},
		{"space", "bob smith", "", "", false},
		{"comma", "", "a,b", "", false},
		{"colon", "", "", "a:b", false},
		{"hash", "bob#member", "", "", false},
		{"too-long", strings.Repeat("a", 257), "", "", false},
		{"non-ascii", "", "", "caf\u00e9", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := builtins.ValidIDs(context.Background(), tt.a, tt.b, tt.c); got != tt.want || err != nil {
				t.Fatalf("validIDs = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestCheckArgumentsValidatedOnce: the check builtin only splits its
// arguments and the store validates them, so bad ones are still refused.
func TestCheckArgumentsValidatedOnce(t *testing.T) {
	ctx := context.Background()
	s := openDrive(t)
	e := newEngine(t, s, "p.rego", "package p\nimport rego.v1\nallow if nexus.check(input.o, input.p, input.s)\n", "p/allow")
	for _, in := range []string{
		`{"o":"file:report.pdf","p":"read","s":"user:bob#"}`,
		`{"o":"file:report.pdf","p":"read","s":"user:b b"}`,
		`{"o":"file:re port","p":"read","s":"user:bob"}`,
		`{"o":"filereport","p":"read","s":"user:bob"}`,
		`{"o":"file:report.pdf","p":"read","s":"user:bob#Member"}`,
		`{"o":"File:report.pdf","p":"read","s":"user:bob"}`,
	} {
		if out, err := e.Eval(ctx, "p/allow", []byte(in), nil); err == nil {
			t.Errorf("%s: %s, want an error", in, out)
		}
	}
	if out, err := e.Eval(ctx, "p/allow", []byte(`{"o":"file:report.pdf","p":"read","s":"user:bob"}`), nil); err != nil || string(out) != "true" {
		t.Fatalf("a valid check: %s %v", out, err)
	}
}
