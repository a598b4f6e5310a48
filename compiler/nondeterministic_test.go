package compiler_test

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/types"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

// TestNondeterministic: the manifest names, for each entrypoint, the
// non-deterministic builtins its rules can reach, however they reach them.
func TestNondeterministic(t *testing.T) {
	const head = "package p\nimport rego.v1\n"
	tests := []struct {
		name     string
		modules  map[string]string
		eps      []string // default p/allow
		builtins []bundle.HostBuiltin
		optimize int
		want     map[string][]string
	}{
		{name: "none", modules: map[string]string{"p.rego": head + `allow if { nexus.check("doc:1", "read", input.user); time.parse_rfc3339_ns("2024-01-01T00:00:00Z") > 0; uuid.parse("00000000-0000-4000-8000-000000000000") }`},
			want: map[string][]string{"p/allow": {}}},
		{name: "time.now_ns directly", modules: map[string]string{"p.rego": head + `allow if time.now_ns() > 0`},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "through a function", modules: map[string]string{"p.rego": head + "late(x) if time.now_ns() > x\nallow if late(1)"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "through another package's rule", modules: map[string]string{
			"p.rego": head + "import data.clock\nallow if clock.now > 0",
			"q.rego": "package clock\nimport rego.v1\nnow := time.now_ns()"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "through another package's function", modules: map[string]string{
			"p.rego": head + "allow if data.lib.stamp(1) > 0",
			"q.rego": "package lib\nimport rego.v1\nstamp(x) := time.now_ns() + x"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "through a dynamic reference", modules: map[string]string{
			"p.rego": head + "allow if { some k; data.clocks[k].now > 0 }",
			"q.rego": "package clocks.a\nimport rego.v1\nnow := time.now_ns()"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "through a package as a whole", modules: map[string]string{
			"p.rego": head + "allow if { d := data.clocks; count(d) > 0 }",
			"q.rego": "package clocks.a\nimport rego.v1\nnow := rand.intn(\"k\", 10)"},
			want: map[string][]string{"p/allow": {"rand.intn"}}},
		{name: "in an else branch", modules: map[string]string{"p.rego": head + "allow := false if input.x\nelse := time.now_ns() > 0"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "in a comprehension", modules: map[string]string{"p.rego": head + "allow if count([t | some i in [1]; t := time.now_ns() + i]) > 0"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "unreachable from the entrypoint", modules: map[string]string{"p.rego": head + "now := time.now_ns()\nallow if input.user == \"a\""},
			want: map[string][]string{"p/allow": {}}},
		{name: "per entrypoint", modules: map[string]string{"p.rego": head + "now := time.now_ns()\nallow if input.user == \"a\""},
			eps:  []string{"p/allow", "p/now"},
			want: map[string][]string{"p/allow": {}, "p/now": {"time.now_ns"}}},
		{name: "a package entrypoint", modules: map[string]string{"p.rego": head + "now := time.now_ns()\nallow if input.user == \"a\""},
			eps:  []string{"p"},
			want: map[string][]string{"p": {"time.now_ns"}}},
		{name: "http.send", modules: map[string]string{"p.rego": head + `allow if http.send({"method": "get", "url": "http://pdp.test/x"}).status_code == 200`},
			want: map[string][]string{"p/allow": {"http.send"}}},
		{name: "http.send cache true", modules: map[string]string{"p.rego": head + `allow if http.send({"method": "get", "url": sprintf("http://pdp.test/%s", [input.user]), "cache": true}).status_code == 200`},
			want: map[string][]string{"p/allow": {}}},
		{name: "http.send force_cache true", modules: map[string]string{"p.rego": head + `allow if http.send({"method": "get", "url": "http://pdp.test/x", "force_cache": true, "force_cache_duration_seconds": 60}).status_code == 200`},
			want: map[string][]string{"p/allow": {}}},
		{name: "http.send cache true in a local", modules: map[string]string{"p.rego": head + `allow if { req := {"method": "get", "url": "http://pdp.test/x", "cache": true}; http.send(req).status_code == 200 }`},
			want: map[string][]string{"p/allow": {}}},
		{name: "http.send cache false", modules: map[string]string{"p.rego": head + `allow if http.send({"method": "get", "url": "http://pdp.test/x", "cache": false}).status_code == 200`},
			want: map[string][]string{"p/allow": {"http.send"}}},
		{name: "http.send cache from input", modules: map[string]string{"p.rego": head + `allow if http.send({"method": "get", "url": "http://pdp.test/x", "cache": input.cache}).status_code == 200`},
			want: map[string][]string{"p/allow": {"http.send"}}},
		{name: "http.send request from a function argument", modules: map[string]string{"p.rego": head + "get(req) := http.send(req)\nallow if get({\"method\": \"get\", \"url\": \"http://pdp.test/x\", \"cache\": true}).status_code == 200"},
			want: map[string][]string{"p/allow": {"http.send"}}},
		{name: "rand.intn", modules: map[string]string{"p.rego": head + `allow if rand.intn("k", 2) == 0`},
			want: map[string][]string{"p/allow": {"rand.intn"}}},
		{name: "uuid.rfc4122", modules: map[string]string{"p.rego": head + `allow if uuid.rfc4122("k") != ""`},
			want: map[string][]string{"p/allow": {"uuid.rfc4122"}}},
		{name: "opa.runtime", modules: map[string]string{"p.rego": head + `allow if opa.runtime().env.X == "1"`},
			want: map[string][]string{"p/allow": {"opa.runtime"}}},
		{name: "io.jwt.decode_verify reads the clock", modules: map[string]string{"p.rego": head + `allow if { [ok, _, _] := io.jwt.decode_verify(input.token, {"secret": "s"}); ok }`},
			want: map[string][]string{"p/allow": {"io.jwt.decode_verify"}}},
		{name: "several, sorted", modules: map[string]string{"p.rego": head + "allow if { rand.intn(\"k\", 2) == 0; time.now_ns() > 0 }"},
			want: map[string][]string{"p/allow": {"rand.intn", "time.now_ns"}}},
		{name: "replaced with with still counts", modules: map[string]string{"p.rego": head + "late if time.now_ns() > 0\nallow if late with time.now_ns as 1"},
			want: map[string][]string{"p/allow": {"time.now_ns"}}},
		{name: "a replacement by with counts", modules: map[string]string{"p.rego": head + "id(k) := k\ncheck if id(\"k\") != \"\"\nallow if check with id as uuid.rfc4122"},
			want: map[string][]string{"p/allow": {"uuid.rfc4122"}}},
		{name: "a host builtin declared non-deterministic", modules: map[string]string{"p.rego": head + "allow if { nexus.check(\"doc:1\", \"read\", input.user); ext.now() > 0 }"},
			builtins: []bundle.HostBuiltin{{Name: "ext.now", Decl: types.NewFunction(nil, types.N), Nondeterministic: true}},
			want:     map[string][]string{"p/allow": {"ext.now"}}},
		{name: "a host builtin declared deterministic", modules: map[string]string{"p.rego": head + "allow if ext.double(2) == 4"},
			builtins: []bundle.HostBuiltin{{Name: "ext.double", Decl: types.NewFunction(types.Args(types.N), types.N)}},
			want:     map[string][]string{"p/allow": {}}},
		{name: "optimised", optimize: 2, modules: map[string]string{
			"p.rego": head + "import data.clock\nallow if clock.now > input.t\ndeny if input.user == \"a\"",
			"q.rego": "package clock\nimport rego.v1\nnow := time.now_ns()"},
			eps:  []string{"p/allow", "p/deny"},
			want: map[string][]string{"p/allow": {"time.now_ns"}, "p/deny": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := tt.eps
			if eps == nil {
				eps = []string{"p/allow"}
			}
			b, err := compiler.Compile(context.Background(), compiler.Options{Modules: tt.modules, Entrypoints: eps, Builtins: tt.builtins, OptimizationLevel: tt.optimize})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := b.Write(&buf); err != nil {
				t.Fatal(err)
			}
			rb, err := bundle.Read(&buf)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, ep := range rb.Manifest.Entrypoints {
				names, known := rb.Manifest.Nondeterministic(ep)
				if !known {
					t.Fatalf("%s: unknown", ep)
				}
				got[ep] = names
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("non-deterministic builtins = %q, want %q", got, tt.want)
			}
		})
	}
}
