package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/types"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

const relPolicy = `package rel

default allow := false

allow if nexus.check(input.object, input.permission, input.subject)

roles := nexus.roles(input.subject, input.tenant)

admin if "admin" in nexus.roles(input.subject, input.tenant)

viewers := nexus.relations(input.object, "viewer")

files := nexus.lookup_resources(input.subject, "read", "file")

readers := nexus.lookup_subjects(input.object, "read", "user")

shout := nexus.shout(input.subject)

four := nexus.four(input.a, input.b, input.c, input.d)

obj := nexus.obj(input.a, input.b)
`

type ctxKey struct{}

func relRegistry(t testing.TB) *engine.Registry {
	t.Helper()
	r := engine.NewRegistry()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register("nexus.check", 0, engine.Predicate3(func(ctx context.Context, object, permission, subject string) (bool, error) {
		if subject == "user:broken" {
			return false, errors.New("depth limit exceeded")
		}
		if ctx.Value(ctxKey{}) == "deny-all" {
			return false, nil
		}
		return object == "doc:1" && permission == "read" && subject == "user:alice", nil
	})))
	must(r.Register("nexus.roles", 0, engine.StringList2(func(_ context.Context, dst []string, subject, tenant string) ([]string, error) {
		if subject == "user:alice" && tenant == "acme" {
			return append(dst, "admin", `quo"te`, "ünï"), nil
		}
		return dst, nil
	})))
	must(r.Register("nexus.relations", 0, func(_ context.Context, dst []string, object, relation string) ([]string, error) {
		return append(dst, object+"#"+relation), nil
	}))
	must(r.Register("nexus.lookup_resources", 0, engine.StringList3(func(_ context.Context, dst []string, s, p, ty string) ([]string, error) {
		return append(dst, ty+":1", ty+":2"), nil
	})))
	must(r.Register("nexus.lookup_subjects", 0, func(_ context.Context, dst []string, o, p, ty string) ([]string, error) {
		return dst, nil
	}))
	must(r.Register("nexus.shout", 1, engine.Generic(func(_ context.Context, args []*ast.Term) (*ast.Term, error) {
		s, ok := args[0].Value.(ast.String)
		if !ok {
			return nil, nil
		}
		return ast.StringTerm(strings.ToUpper(string(s)) + "!"), nil
	})))
	must(r.Register("nexus.four", 0, engine.StringList4(func(_ context.Context, dst []string, a, b, c, d string) ([]string, error) {
		return append(dst, d, c, b, a), nil
	})))
	must(r.Register("nexus.obj", 0, engine.JSON2(func(_ context.Context, dst []byte, a, b string) ([]byte, error) {
		switch a {
		case "none":
			return dst, nil
		case "fail":
			return dst, errors.New("no answer")
		}
		return fmt.Appendf(dst, `{"a":%q,"n":[1,2.5,null,true],"b":{"x":%q}}`, a, b), nil
	})))
	if err := r.Register("nexus.check", 0, engine.Predicate3(nil)); !errors.Is(err, engine.ErrBuiltinExists) {
		t.Fatalf("duplicate register: %v", err)
	}
	if err := r.Register("x", 0, func() {}); err == nil {
		t.Fatal("register of an unsupported signature succeeded")
	}
	return r
}

func TestHostBuiltins(t *testing.T) {
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"rel.rego": relPolicy},
		Entrypoints: []string{"rel/allow", "rel/roles", "rel/admin", "rel/viewers", "rel/files", "rel/readers", "rel/shout", "rel/four", "rel/obj"},
		Builtins: []bundle.HostBuiltin{
			{Name: "nexus.shout", Decl: types.NewFunction(types.Args(types.S), types.S)},
			{Name: "nexus.four", Decl: types.NewFunction(types.Args(types.S, types.S, types.S, types.S), types.NewArray(nil, types.S))},
			{Name: "nexus.obj", Decl: types.NewFunction(types.Args(types.S, types.S), types.A)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, engine.Config{Builtins: relRegistry(t)}, b)
	tests := []struct {
		name, ep, input, want string
		ctx                   context.Context
		wantCode              string
		undefined             bool
	}{
		{name: "check true", ep: "rel/allow", input: `{"object":"doc:1","permission":"read","subject":"user:alice"}`, want: "true"},
		{name: "check false", ep: "rel/allow", input: `{"object":"doc:1","permission":"write","subject":"user:alice"}`, want: "false"},
		{name: "check gets ctx", ep: "rel/allow", input: `{"object":"doc:1","permission":"read","subject":"user:alice"}`, want: "false",
			ctx: context.WithValue(context.Background(), ctxKey{}, "deny-all")},
		{name: "check non-string is undefined", ep: "rel/allow", input: `{"object":1,"permission":"read","subject":"user:alice"}`, want: "false"},
		{name: "check error fails closed", ep: "rel/allow", input: `{"object":"doc:1","permission":"read","subject":"user:broken"}`, wantCode: engine.CodeBuiltin},
		{name: "roles", ep: "rel/roles", input: `{"subject":"user:alice","tenant":"acme"}`, want: `["admin","quo\"te","ünï"]`},
		{name: "roles empty", ep: "rel/roles", input: `{"subject":"user:bob","tenant":"acme"}`, want: `[]`},
		{name: "roles membership", ep: "rel/admin", input: `{"subject":"user:alice","tenant":"acme"}`, want: `true`},
		{name: "relations", ep: "rel/viewers", input: `{"object":"doc:1"}`, want: `["doc:1#viewer"]`},
		{name: "lookup resources", ep: "rel/files", input: `{"subject":"user:alice"}`, want: `["file:1","file:2"]`},
		{name: "lookup subjects", ep: "rel/readers", input: `{"object":"doc:1"}`, want: `[]`},
		{name: "generic", ep: "rel/shout", input: `{"subject":"hey"}`, want: `"HEY!"`},
		{name: "four strings", ep: "rel/four", input: `{"a":"1","b":"2","c":"3","d":"ü\""}`, want: `["ü\"","3","2","1"]`},
		{name: "four with a non-string", ep: "rel/four", input: `{"a":"1","b":2,"c":"3","d":"4"}`, undefined: true},
		{name: "json value", ep: "rel/obj", input: `{"a":"x","b":"y\"z"}`, want: `{"a":"x","b":{"x":"y\"z"},"n":[1,2.5,null,true]}`},
		{name: "json nothing is undefined", ep: "rel/obj", input: `{"a":"none","b":""}`, undefined: true},
		{name: "json error fails closed", ep: "rel/obj", input: `{"a":"fail","b":""}`, wantCode: engine.CodeBuiltin},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got, err := e.Eval(ctx, tc.ep, []byte(tc.input), nil)
			if tc.undefined {
				if !errors.Is(err, engine.ErrUndefined) {
					t.Fatalf("got %s, %v; want undefined", got, err)
				}
				return
			}
			if tc.wantCode != "" {
				var ee *engine.EvalError
				if !errors.As(err, &ee) || ee.Code != tc.wantCode {
					t.Fatalf("err = %v, want code %s", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("eval: %v", err)
			}
			if string(got) != tc.want && !sameJSON(got, []byte(tc.want)) {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// sameJSON reports whether a and b are the same JSON value (an object's
// members in any order).
func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func TestHostBuiltinMissing(t *testing.T) {
	b := compileModules(t, map[string]string{"rel.rego": "package rel\nallow if nexus.check(\"a\", \"b\", \"c\")\n"}, nil, "rel/allow")
	e := newEngine(t, engine.Config{}, nil)
	err := e.Load(context.Background(), b)
	if !errors.Is(err, engine.ErrInvalidBundle) || !strings.Contains(err.Error(), "nexus.check") {
		t.Fatalf("load without nexus.check: %v", err)
	}
}

func TestEvalDoesNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count under -short")
	}
	pol := relPolicy
	for _, rule := range []string{"shout := nexus.shout(input.subject)\n", "four := nexus.four(input.a, input.b, input.c, input.d)\n", "obj := nexus.obj(input.a, input.b)\n"} {
		pol = strings.Replace(pol, rule, "", 1)
	}
	b := compileModules(t, map[string]string{"rel.rego": pol}, nil, "rel/allow", "rel/admin")
	e := newEngine(t, engine.Config{Builtins: relRegistry(t), MaxInstances: 1}, b)
	for _, tc := range []struct{ ep, input string }{
		{"rel/allow", `{"object":"doc:1","permission":"read","subject":"user:alice"}`},
		{"rel/admin", `{"subject":"user:alice","tenant":"acme"}`},
	} {
		in := []byte(tc.input)
		dst := make([]byte, 0, 64)
		ctx, cancel := context.WithCancel(context.Background())
		allocs := testing.AllocsPerRun(200, func() {
			var err error
			dst, err = e.Eval(ctx, tc.ep, in, dst[:0])
			if err != nil {
				t.Fatal(err)
			}
		})
		cancel()
		if allocs > 0 {
			t.Errorf("%s: %.1f allocations per evaluation, want 0", tc.ep, allocs)
		}
	}
}

// TestHostBuiltinStrings passes strings that JSON must escape from host
// builtins to the policy, through both ways a result enters the instance
// (the fast path's string array and a generic builtin's term): the policy
// sees each string as the builtin returned it, invalid UTF-8 replaced by
// U+FFFD as encoding/json does.
func TestHostBuiltinStrings(t *testing.T) {
	tricky := []string{
		"", "plain", `q"uote\back`, "<a&b>", "line\u2028sep\u2029", "\x00nul", "\x01\x1f\x7f",
		"\t\r\n\b\f", "ünï😀", "bad\xffutf8\xfe", "\xed\xa0\x80", "/slash",
	}
	const pol = `package s

list := nexus.strings("a", "b")

one := nexus.string_at(input.i)
`
	reg := engine.NewRegistry()
	if err := reg.Register("nexus.strings", 0, engine.StringList2(func(_ context.Context, dst []string, _, _ string) ([]string, error) {
		return append(dst, tricky...), nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("nexus.string_at", 1, engine.Generic(func(_ context.Context, args []*ast.Term) (*ast.Term, error) {
		i, ok := args[0].Value.(ast.Number).Int()
		if !ok || i < 0 || i >= len(tricky) {
			return nil, nil
		}
		return ast.StringTerm(tricky[i]), nil
	})); err != nil {
		t.Fatal(err)
	}
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"s.rego": pol},
		Entrypoints: []string{"s/list", "s/one"},
		Builtins: []bundle.HostBuiltin{
			{Name: "nexus.strings", Decl: types.NewFunction(types.Args(types.S, types.S), types.NewArray(nil, types.S))},
			{Name: "nexus.string_at", Decl: types.NewFunction(types.Args(types.N), types.S)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, engine.Config{Builtins: reg}, b)
	want := make([]string, len(tricky))
	for i, s := range tricky {
		want[i] = strings.ToValidUTF8(s, "\uFFFD")
		if s == "\xed\xa0\x80" { // a surrogate: three invalid bytes
			want[i] = "\uFFFD\uFFFD\uFFFD"
		}
	}
	out, err := e.Eval(context.Background(), "s/list", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("string array:\n got %q\nwant %q", got, want)
	}
	for i := range tricky {
		out, err := e.Eval(context.Background(), "s/one", []byte(fmt.Sprintf(`{"i":%d}`, i)), nil)
		if err != nil {
			t.Fatalf("%q: %v", tricky[i], err)
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("result %q: %v", out, err)
		}
		if got != want[i] {
			t.Errorf("generic: got %q, want %q", got, want[i])
		}
	}
}
