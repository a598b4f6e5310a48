package engine_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/open-policy-agent/opa/v1/compile"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/fixture"
)

func compileModules(t testing.TB, modules map[string]string, data map[string]any, entrypoints ...string) *bundle.Bundle {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{Modules: modules, Data: data, Entrypoints: entrypoints, Revision: "r1"})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return b
}

// opaWasmBundle compiles modules as `opa build -t wasm` does (OPA's
// compile package, without nexus' rewrites): every builtin OPA's Wasm
// runtime has stays its code.
func opaWasmBundle(t testing.TB, modules map[string]string, entrypoints ...string) *bundle.Bundle {
	t.Helper()
	archive := fixture.OPABuild(t, fixture.WriteTree(t, modules), compile.TargetWasm, entrypoints...)
	b, err := bundle.Read(bytes.NewReader(archive))
	if err != nil {
		t.Fatalf("read opa build's bundle: %v", err)
	}
	return b
}

func newEngine(t testing.TB, cfg engine.Config, b *bundle.Bundle) *engine.Engine {
	t.Helper()
	e, err := engine.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if b != nil {
		if err := e.Load(context.Background(), b); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	return e
}

const authz = `package nexus.authz

default allow := false

allow if data.roles[input.user] == "admin"

greeting := sprintf("hello %s", [input.user])

users contains u if some u, _ in data.roles

undef if input.nope == 1
`

func TestEvalBasic(t *testing.T) {
	b := compileModules(t, map[string]string{"authz.rego": authz}, map[string]any{"roles": map[string]any{"bob": "admin", "eve": "user"}},
		"nexus/authz/allow", "nexus/authz/greeting", "nexus/authz/users", "nexus/authz/undef")
	e := newEngine(t, engine.Config{}, b)
	tests := []struct {
		name, ep, input, want string
		wantErr               error
	}{
		{name: "allow", ep: "nexus/authz/allow", input: `{"user":"bob"}`, want: `true`},
		{name: "deny", ep: "nexus/authz/allow", input: `{"user":"eve"}`, want: `false`},
		{name: "no input", ep: "nexus/authz/allow", want: `false`},
		{name: "sprintf", ep: "nexus/authz/greeting", input: `{"user":"bob"}`, want: `"hello bob"`},
		{name: "set", ep: "nexus/authz/users", input: `{}`, want: `["bob","eve"]`},
		{name: "undefined", ep: "nexus/authz/undef", input: `{}`, wantErr: engine.ErrUndefined},
		{name: "bad input", ep: "nexus/authz/allow", input: `{"user":`, wantErr: engine.ErrInvalidInput},
		{name: "unknown entrypoint", ep: "nexus/authz/nope", input: `{}`, wantErr: engine.ErrUnknownEntrypoint},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.Eval(context.Background(), tc.ep, []byte(tc.input), nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("eval: %v", err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPrint(t *testing.T) {
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"p.rego": "package p\n\nallow if {\n\tprint(\"user\", input.user)\n\tinput.user == \"bob\"\n}\n"},
		Entrypoints: []string{"p/allow"},
		EnablePrint: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	e := newEngine(t, engine.Config{Print: &out, MaxInstances: 1}, b)
	got, err := e.Eval(context.Background(), "p/allow", []byte(`{"user":"bob"}`), nil)
	if err != nil || string(got) != "true" {
		t.Fatalf("eval = %s, %v", got, err)
	}
	if out.String() != "user bob\n" {
		t.Fatalf("print output %q", out.String())
	}
}

// TestEvalTrusted: on input its caller's encoder wrote, EvalTrusted answers
// as Eval does; input that is not UTF-8 is still refused; and UTF-8 that is
// not JSON, which it does not check, leaves later evaluations unharmed.
func TestEvalTrusted(t *testing.T) {
	b := compileModules(t, map[string]string{"authz.rego": authz}, map[string]any{"roles": map[string]any{"bob": "admin"}},
		"nexus/authz/allow", "nexus/authz/greeting")
	e := newEngine(t, engine.Config{MaxInstances: 1}, b)
	ctx := context.Background()
	for _, in := range []string{`{"user":"bob"}`, `{"user":"eve"}`, ``, `{"user":"b\u00f6b \ud83d\ude00"}`} {
		for _, ep := range []string{"nexus/authz/allow", "nexus/authz/greeting"} {
			want, werr := e.Eval(ctx, ep, []byte(in), nil)
			got, err := e.EvalTrusted(ctx, ep, []byte(in), nil)
			if string(got) != string(want) || !errors.Is(err, werr) {
				t.Errorf("%s(%s): EvalTrusted %s, %v; Eval %s, %v", ep, in, got, err, want, werr)
			}
		}
	}
	if _, err := e.EvalTrusted(ctx, "nexus/authz/allow", []byte("{\"user\":\"b\xffb\"}"), nil); !errors.Is(err, engine.ErrInvalidInput) {
		t.Fatalf("input that is not UTF-8: err = %v, want ErrInvalidInput", err)
	}
	for _, in := range []string{`{"user":`, `{"user":"bob"}}`, `{1,2}`, `[`} {
		_, _ = e.EvalTrusted(ctx, "nexus/authz/allow", []byte(in), nil)
		if out, err := e.EvalTrusted(ctx, "nexus/authz/allow", []byte(`{"user":"bob"}`), nil); err != nil || string(out) != "true" {
			t.Fatalf("after %q: allow = %s, %v; want true", in, out, err)
		}
	}
}

func TestNewDoneContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if e, err := engine.New(ctx, engine.Config{}); !errors.Is(err, context.Canceled) {
		if e != nil {
			_ = e.Close(context.Background())
		}
		t.Fatalf("New with a canceled context: err = %v, want context.Canceled", err)
	}
}
