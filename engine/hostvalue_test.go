package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/types"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

// rewrite writes v again through w, read only through Value's methods
// (objects and sets through their JSON).
func rewrite(w *engine.ValueWriter, v engine.Value) {
	switch v.Kind() {
	case engine.KindNull:
		w.Null()
	case engine.KindBool:
		b, _ := v.Bool()
		w.Bool(b)
	case engine.KindNumber:
		n, _ := v.Number(nil)
		w.Number(string(n))
	case engine.KindString:
		s, _ := v.Str()
		w.String(strings.Clone(s))
	case engine.KindArray:
		w.BeginArray()
		for i := range v.Len() {
			rewrite(w, v.Index(i))
		}
		w.End()
	case engine.KindObject, engine.KindSet:
		w.JSON(v.AppendJSON(nil))
	}
}

const valuesPolicy = `package v

echo := nexus.echo(input.a, input.b)

kinds := nexus.kinds(input.a, input.b)

set_echo := nexus.echo({1, "x", [2]}, {})

allow if nexus.echo(input.a, input.b)

three := nexus.three(input.a, input.b, input.c)
`

var kindNames = map[engine.Kind]string{
	engine.KindNull: "null", engine.KindBool: "boolean", engine.KindNumber: "number", engine.KindString: "string",
	engine.KindArray: "array", engine.KindObject: "object", engine.KindSet: "set",
}

func valuesEngine(t *testing.T) *engine.Engine {
	t.Helper()
	echo := func(_ context.Context, w *engine.ValueWriter, a, b engine.Value) error {
		if s, _ := b.Str(); s != "" {
			switch s {
			case "undefined":
				return nil
			case "fail":
				return errors.New("no answer")
			case "open":
				w.BeginArray()
				return nil
			case "two":
				w.Null()
				w.Null()
				return nil
			case "index":
				rewrite(w, a.Index(a.Len()))
				return nil
			}
		}
		w.BeginArray()
		rewrite(w, a)
		rewrite(w, b)
		w.End()
		return nil
	}
	kinds := func(_ context.Context, w *engine.ValueWriter, a, b engine.Value) error {
		w.BeginArray()
		for _, v := range []engine.Value{a, b} {
			w.BeginArray()
			w.String(kindNames[v.Kind()])
			w.Int(int64(v.Len()))
			w.String(string(v.AppendJSON(nil)))
			w.End()
		}
		w.End()
		return nil
	}
	r := engine.NewRegistry()
	for name, fn := range map[string]any{"nexus.echo": engine.Values2(echo), "nexus.kinds": kinds, "nexus.three": engine.Values2(echo)} {
		if err := r.Register(name, 0, fn); err != nil {
			t.Fatal(err)
		}
	}
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"v.rego": valuesPolicy},
		Entrypoints: []string{"v/echo", "v/kinds", "v/set_echo", "v/allow", "v/three"},
		Builtins: []bundle.HostBuiltin{
			{Name: "nexus.echo", Decl: types.NewFunction(types.Args(types.A, types.A), types.A)},
			{Name: "nexus.kinds", Decl: types.NewFunction(types.Args(types.A, types.A), types.A)},
			{Name: "nexus.three", Decl: types.NewFunction(types.Args(types.A, types.A, types.A), types.A)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, engine.Config{Builtins: r}, b)
}

// TestValuesBuiltin: a Values2 builtin reads every kind of value in place
// and writes any value back, as it was.
func TestValuesBuiltin(t *testing.T) {
	e := valuesEngine(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, input, want string }{
		{"empty", `{"a":"","b":[]}`, `["",[]]`},
		{"empty object", `{"a":{},"b":null}`, `[{},null]`},
		{"unicode", `{"a":"ünï😀\u2028","b":"日本"}`, "[\"ünï😀\u2028\",\"日本\"]"},
		{"escapes", `{"a":"q\"\\\n\t\u0000\u001f","b":true}`, `["q\"\\\n\t\u0000\u001f",true]`},
		{"big numbers", `{"a":112345678901234567890,"b":[-0.5,1.0,1e300,-9223372036854775808]}`, `[112345678901234567890,[-0.5,1.0,1e300,-9223372036854775808]]`},
		{"nested", `{"a":[[],[[1,[2,[3]]]],{"k":[{"x":null}]}],"b":false}`, `[[[],[[1,[2,[3]]]],{"k":[{"x":null}]}],false]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := e.Eval(ctx, "v/echo", []byte(tc.input), nil)
			if err != nil || string(out) != tc.want {
				t.Fatalf("= %s, %v; want %s", out, err, tc.want)
			}
		})
	}
	out, err := e.Eval(ctx, "v/set_echo", nil, nil)
	if err != nil || !strings.HasPrefix(string(out), "[[") || !strings.Contains(string(out), `"x"`) || !strings.HasSuffix(string(out), ",{}]") {
		t.Fatalf("set: %s, %v", out, err)
	}
	out, err = e.Eval(ctx, "v/kinds", []byte(`{"a":{"x":[1,"é"]},"b":12.50}`), nil)
	if want := `[["object",1,"{\"x\":[1,\"é\"]}"],["number",0,"12.50"]]`; err != nil || string(out) != want {
		t.Fatalf("kinds = %s, %v; want %s", out, err, want)
	}
}

// TestValuesBuiltinMisuse: writing nothing is undefined; an error, a
// writer left in a bad state, a read out of range or a call with the
// wrong arity fails the evaluation (never an allow).
func TestValuesBuiltinMisuse(t *testing.T) {
	e := valuesEngine(t)
	ctx := context.Background()
	if _, err := e.Eval(ctx, "v/echo", []byte(`{"a":1,"b":"undefined"}`), nil); !errors.Is(err, engine.ErrUndefined) {
		t.Fatalf("undefined: %v", err)
	}
	if out, err := e.Eval(ctx, "v/allow", []byte(`{"a":1,"b":"undefined"}`), nil); !errors.Is(err, engine.ErrUndefined) {
		t.Fatalf("allow when undefined = %s, %v", out, err)
	}
	for _, tc := range []struct{ name, ep, input, code string }{
		{"error", "v/allow", `{"a":1,"b":"fail"}`, engine.CodeBuiltin},
		{"collection left open", "v/allow", `{"a":1,"b":"open"}`, engine.CodeBuiltin},
		{"two values", "v/echo", `{"a":1,"b":"two"}`, engine.CodeBuiltin},
		{"index out of range", "v/allow", `{"a":[1],"b":"index"}`, ""},
		{"index of a non-array", "v/allow", `{"a":"s","b":"index"}`, ""},
		{"wrong arity", "v/three", `{"a":1,"b":2,"c":3}`, engine.CodeBuiltin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := e.Eval(ctx, tc.ep, []byte(tc.input), nil)
			var ee *engine.EvalError
			if !errors.As(err, &ee) || (tc.code != "" && ee.Code != tc.code) {
				t.Fatalf("= %s, %v; want an evaluation error %s", out, err, tc.code)
			}
		})
	}
	// The instance is still good after each failure.
	if out, err := e.Eval(ctx, "v/echo", []byte(`{"a":1,"b":2}`), nil); err != nil || string(out) != "[1,2]" {
		t.Fatalf("after the failures: %s, %v", out, err)
	}
}
