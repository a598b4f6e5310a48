package compiler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

const policy = `package nexus.authz

default allow := false

allow if data.roles[input.user] == "admin"
`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCompilePaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "policy", "authz.rego"), policy)
	writeFile(t, filepath.Join(dir, "policy", "extra", "data.yaml"), "limits:\n  max: 3\n")
	writeFile(t, filepath.Join(dir, "roles.json"), `{"roles": {"bob": "admin"}}`)
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Paths:       []string{filepath.Join(dir, "policy"), filepath.Join(dir, "roles.json")},
		Entrypoints: []string{"nexus/authz/allow"},
		Revision:    "v7",
	})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	if b.Manifest.Revision != "v7" || !slices.Equal(b.Manifest.Entrypoints, []string{"nexus/authz/allow"}) {
		t.Fatalf("manifest = %+v", b.Manifest)
	}
	if !slices.Equal(b.Manifest.Roots, []string{"extra", "nexus/authz", "roles"}) {
		t.Fatalf("roots = %v", b.Manifest.Roots)
	}
	if !bytes.HasPrefix(b.Wasm, []byte("\x00asm")) {
		t.Fatal("wasm lacks the magic number")
	}
	for _, want := range []string{`"roles":{"bob":"admin"}`, `"extra":{"limits":{"max":3}}`} {
		if !strings.Contains(string(b.Data), want) {
			t.Fatalf("data %s lacks %s", b.Data, want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name     string
		modules  map[string]string
		eps      []string
		wantCode string
		wantErr  error
		want     []string // substrings of the message
	}{
		{name: "no entrypoint", modules: map[string]string{"a.rego": policy}, wantErr: compiler.ErrNoEntrypoint},
		{name: "no policy", eps: []string{"a/b"}, wantErr: compiler.ErrNoPolicy},
		{name: "parse error", modules: map[string]string{"bad.rego": "package p\n\nallow if {\n  x := \n}\n"}, eps: []string{"p/allow"},
			wantCode: compiler.CodeParse, want: []string{"bad.rego:5:1: "}},
		{name: "type error", modules: map[string]string{"t.rego": "package p\n\nallow if {\n\tcount(1) > 0\n}\n"}, eps: []string{"p/allow"},
			wantCode: compiler.CodeType, want: []string{"t.rego:4:2: ", "count"}},
		{name: "unsupported builtins in one error", modules: map[string]string{"u.rego": "package p\n\nallow if {\n\tfoo.bar(1)\n\tbaz(2)\n\tx := qux(3)\n}\n"}, eps: []string{"p/allow"},
			wantCode: compiler.CodeUnsupportedBuiltin, want: []string{"u.rego:5:2: ", "baz, foo.bar, qux"}},
		{name: "user functions are not builtins", modules: map[string]string{"f.rego": "package p\n\nf(x) := x + 1\n\nallow if f(1) == 2\n"}, eps: []string{"p/allow"}},
		{name: "unknown entrypoint", modules: map[string]string{"a.rego": policy}, eps: []string{"nexus/authz/nope"}, wantCode: compiler.CodeCompile, want: []string{"nope"}},
		{name: "safety error", modules: map[string]string{"s.rego": "package p\n\nallow if x > 1\n"}, eps: []string{"p/allow"}, wantCode: compiler.CodeCompile, want: []string{"s.rego:3:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compiler.Compile(context.Background(), compiler.Options{Modules: tc.modules, Entrypoints: tc.eps})
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			case tc.wantCode == "":
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			var errs compiler.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %T %v, want compiler.Errors", err, err)
			}
			if errs.Code() != tc.wantCode {
				t.Fatalf("code = %s, want %s (%v)", errs.Code(), tc.wantCode, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestBundleRoundTrip(t *testing.T) {
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"authz.rego": policy},
		Data:        map[string]any{"roles": map[string]any{"bob": "admin"}, "big": json.Number("12345678901234567890")},
		Entrypoints: []string{"nexus/authz/allow"},
		Revision:    "r1",
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := b.Write(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("bundle output is not deterministic")
	}
	got, err := bundle.Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got.Wasm, b.Wasm) || !bytes.Equal(got.Data, b.Data) {
		t.Fatal("wasm or data changed in the round trip")
	}
	if got.Manifest.Revision != "r1" || !slices.Equal(got.Manifest.Entrypoints, b.Manifest.Entrypoints) || !slices.Equal(got.Manifest.Roots, b.Manifest.Roots) {
		t.Fatalf("manifest %+v, want %+v", got.Manifest, b.Manifest)
	}
	if !strings.Contains(string(got.Data), "12345678901234567890") {
		t.Fatalf("big number lost: %s", got.Data)
	}
	fromJSON, err := compiler.Compile(context.Background(), compiler.Options{
		Modules:     map[string]string{"authz.rego": policy},
		DataJSON:    []byte(`{"big": 112345678901234567890}`),
		Entrypoints: []string{"nexus/authz/allow"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(fromJSON.Data), "112345678901234567890") {
		t.Fatalf("big number from DataJSON lost: %s", fromJSON.Data)
	}
}

// TestCapabilitiesDeclareNexusBuiltins holds the capabilities to what the
// engine provides: nexus' relationship builtins, each declared once with
// the signature of the fast-path function that implements it (strings in,
// but for nexus.envoy_decide's request, read in place whatever its type;
// a boolean, strings or any value out), next to OPA's builtins, which the engine
// backs with OPA's Go implementations; and the compiler type checks calls
// against those declarations.
func TestCapabilitiesDeclareNexusBuiltins(t *testing.T) {
	want := map[string]string{
		"nexus.check":            "(string, string, string) => boolean",
		"nexus.valid_ids":        "(string, string, string) => boolean",
		"nexus.roles":            "(string, string) => array[string]",
		"nexus.relations":        "(string, string) => array[string]",
		"nexus.lookup_resources": "(string, string, string) => array[string]",
		"nexus.lookup_subjects":  "(string, string, string) => array[string]",
		"nexus.envoy_decide":     "(string, any) => any",
		"nexus.resource_tenant":  "(string, string) => array[string]",
		"nexus.grant":            "(string, string, string, string) => array[string]",
	}
	seen := map[string]int{}
	for _, b := range compiler.Capabilities().Builtins {
		seen[b.Name]++
		if sig, ok := want[b.Name]; ok && b.Decl.String() != sig {
			t.Errorf("%s is declared %s, want %s", b.Name, b.Decl, sig)
		}
		if strings.HasPrefix(b.Name, "nexus.") {
			if _, ok := want[b.Name]; !ok {
				t.Errorf("capabilities declare %s, which this test does not know", b.Name)
			}
		}
	}
	for name := range want {
		if seen[name] != 1 {
			t.Errorf("%s is declared %d times, want once", name, seen[name])
		}
	}
	for _, name := range []string{"sprintf", "io.jwt.decode", "time.now_ns", "crypto.sha256", "regex.match"} {
		if seen[name] != 1 {
			t.Errorf("OPA builtin %s is declared %d times, want once", name, seen[name])
		}
	}
	if len(bundle.NexusBuiltins) != len(want) {
		t.Errorf("bundle.NexusBuiltins has %d entries, this test knows %d", len(bundle.NexusBuiltins), len(want))
	}

	for _, tc := range []struct{ name, rule string }{
		{"argument type", `allow if nexus.check(1, "read", "user:a")`},
		{"arity", `allow if nexus.roles("user:a")`},
		{"result type", `allow if nexus.check("doc:1", "read", "user:a") == "yes"`},
		{"result element type", `allow if { some r in nexus.roles("user:a", "acme"); r + 1 > 0 }`},
	} {
		_, err := compiler.Compile(context.Background(), compiler.Options{
			Modules:     map[string]string{"p.rego": "package p\n\n" + tc.rule + "\n"},
			Entrypoints: []string{"p/allow"},
		})
		var errs compiler.Errors
		if !errors.As(err, &errs) || errs.Code() != compiler.CodeType {
			t.Errorf("%s: %s compiled with err = %v, want a type error", tc.name, tc.rule, err)
		}
	}
}

func TestCompileOptionalEntrypoints(t *testing.T) {
	const mask = `package system.log

mask contains "/input/password"
`
	tests := []struct {
		name    string
		modules map[string]string
		want    []string
	}{
		{name: "absent", modules: map[string]string{"a.rego": policy}, want: []string{"nexus/authz/allow"}},
		{name: "defined", modules: map[string]string{"a.rego": policy, "m.rego": mask}, want: []string{"nexus/authz/allow", "system/log/mask"}},
		{name: "inside a package below it", modules: map[string]string{"a.rego": policy, "d.rego": "package system.log.drop\n\nx := true\n"}, want: []string{"nexus/authz/allow", "system/log/drop"}},
		{name: "held by a rule's value", modules: map[string]string{"a.rego": policy, "s.rego": "package system\n\nlog := {\"mask\": [\"/input/a\"]}\n"}, want: []string{"nexus/authz/allow"}},
		{name: "already required", modules: map[string]string{"a.rego": policy, "m.rego": mask}, want: []string{"nexus/authz/allow", "system/log/mask"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := []string{"nexus/authz/allow"}
			if tt.name == "already required" {
				eps = append(eps, "system/log/mask")
			}
			b, err := compiler.Compile(context.Background(), compiler.Options{
				Modules:             tt.modules,
				Entrypoints:         eps,
				OptionalEntrypoints: []string{"system/log/mask", "system/log/drop"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(b.Manifest.Entrypoints, tt.want) {
				t.Fatalf("entrypoints %v, want %v", b.Manifest.Entrypoints, tt.want)
			}
		})
	}
}
