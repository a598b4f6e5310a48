package compiler_test

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
)

func TestInputPaths(t *testing.T) {
	tests := []struct {
		name   string
		module string
		want   []string // joined with "."; nil with known=false
		known  bool
		data   map[string]any
	}{
		{"fields", "package p\nimport rego.v1\nallow if { input.user == \"a\"; input.req.method == \"GET\" }\n", []string{"req.method", "user"}, true, nil},
		{"import", "package p\nimport rego.v1\nimport input.attributes.request.http\nallow if http.method == \"GET\"\n", []string{"attributes.request.http.method"}, true, nil},
		{"dynamic-key", "package p\nimport rego.v1\nallow if input.headers[input.h] == \"x\"\n", []string{"h", "headers"}, true, nil},
		{"data-key", "package p\nimport rego.v1\nallow if input.headers[data.cfg.h] == \"x\"\n", []string{"headers.x-user"}, true, map[string]any{"cfg": map[string]any{"h": "x-user"}}},
		{"data-key-assigned", "package p\nimport rego.v1\nallow if { h := data.cfg.h; input.headers[h].v == \"x\" }\n", []string{"headers.x-user"}, true, map[string]any{"cfg": map[string]any{"h": "x-user"}}},
		{"data-key-absent", "package p\nimport rego.v1\nallow if input.headers[data.cfg.h] == \"x\"\nallow if input.user\n", []string{"user"}, true, map[string]any{"cfg": map[string]any{}}},
		{"data-key-not-string", "package p\nimport rego.v1\nallow if input.headers[data.cfg.h] == \"x\"\n", []string{"headers"}, true, map[string]any{"cfg": map[string]any{"h": 1}}},
		{"data-key-from-rule", "package p\nimport rego.v1\nh := \"x-user\"\nallow if input.headers[data.p.h] == \"x\"\n", []string{"headers"}, true, nil},
		{"data-key-replaced-with", "package p\nimport rego.v1\nq if input.headers[data.cfg.h]\nallow if q with data.cfg.h as \"y\"\n", []string{"headers"}, true, map[string]any{"cfg": map[string]any{"h": "x-user"}}},
		{"key-from-input", "package p\nimport rego.v1\nallow if input.m[input.k] == 1\n", []string{"k", "m"}, true, nil},
		{"whole-input", "package p\nimport rego.v1\nallow if count(input) > 1\n", nil, false, nil},
		{"iterate-input", "package p\nimport rego.v1\nallow if { some k; input[k] == 1 }\n", nil, false, nil},
		{"object-get", "package p\nimport rego.v1\nallow if object.get(input.headers, \"x-user\", \"\") == \"a\"\n", []string{"headers.x-user"}, true, nil},
		{"object-get-alias", "package p\nimport rego.v1\nimport input.attributes.request.http\nallow if { s := split(object.get(http.headers, \"x-scopes\", \"\"), \",\"); \"a\" in s }\n", []string{"attributes.request.http.headers.x-scopes"}, true, nil},
		{"object-get-path", "package p\nimport rego.v1\nallow if object.get(input, [\"a\", \"b\", 0, \"c\"], 1) == 2\n", []string{"a.b"}, true, nil},
		{"object-get-empty-path", "package p\nimport rego.v1\nallow if object.get(input.a, [], 1) == 2\n", []string{"a"}, true, nil},
		{"object-get-dynamic-key", "package p\nimport rego.v1\nallow if object.get(input.headers, input.h, \"\") == \"a\"\n", []string{"h", "headers"}, true, nil},
		{"object-get-default-reads", "package p\nimport rego.v1\nallow if object.get(input.headers, \"x\", input.user) == \"a\"\n", []string{"headers.x", "user"}, true, nil},
		{"object-get-variable", "package p\nimport rego.v1\nallow if { x := input.a; object.get(x, \"c\", 0) == 1 }\n", []string{"a.c"}, true, nil},
		{"object-get-variable-counted", "package p\nimport rego.v1\nallow if { x := input.a; object.get(x, \"c\", 0) == 1; count(x) > 1 }\n", []string{"a"}, true, nil},
		{"object-get-whole-input", "package p\nimport rego.v1\nallow if object.get(input, \"a\", 1) == 2\n", []string{"a"}, true, nil},
		{"with", "package p\nimport rego.v1\nq if input.a\nallow if q with input as {\"a\": true}\n", nil, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := compiler.Compile(context.Background(), compiler.Options{Modules: map[string]string{"p.rego": tt.module}, Data: tt.data, Entrypoints: []string{"p/allow"}})
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
			paths, known := rb.Manifest.InputPaths(rb.Data)
			if known != tt.known {
				t.Fatalf("known = %v, want %v (%v)", known, tt.known, paths)
			}
			var got []string
			for _, p := range paths {
				got = append(got, strings.Join(p, "."))
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("paths = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestInputPathsPerEntrypoint: only the rules an entrypoint can reach
// decide what of input it reads; a rule nothing reaches does not keep the
// body, one reached through a function, another package, a `with` or a
// dynamic reference does.
func TestInputPathsPerEntrypoint(t *testing.T) {
	const lib = "package lib\nimport rego.v1\nbody_ok if input.attributes.request.http.body == \"x\"\nf(x) := input.attributes.request.http.body if x\nhdrs := input.attributes.request.http.headers\n"
	tests := []struct {
		name   string
		module string
		want   []string // joined with "."; nil with known=false
		known  bool
	}{
		{"unused-rule", "package p\nimport rego.v1\nallow if input.attributes.request.http.method == \"GET\"\nunused if input.attributes.request.http.body == \"x\"\n",
			[]string{"attributes.request.http.method"}, true},
		{"unused-whole-input", "package p\nimport rego.v1\nallow if input.user == \"a\"\nunused if count(input) > 0\n", []string{"user"}, true},
		{"other-package", "package p\nimport rego.v1\nallow if data.lib.body_ok\n", []string{"attributes.request.http.body"}, true},
		{"function", "package p\nimport rego.v1\nallow if data.lib.f(true) == \"x\"\n", []string{"attributes.request.http.body"}, true},
		{"local-function", "package p\nimport rego.v1\ng(x) := input.a[x]\nallow if g(\"b\")\n", []string{"a"}, true},
		{"with-target", "package p\nimport rego.v1\nallow if data.p.q with data.lib.body_ok as true\nq if input.user\n", []string{"attributes.request.http.body", "user"}, true},
		{"dynamic-ref", "package p\nimport rego.v1\nallow if { some k; data.lib[k] }\n", []string{"attributes.request.http.body", "attributes.request.http.headers"}, true},
		{"reached-whole-input", "package p\nimport rego.v1\nallow if data.p.q\nq if count(input) > 0\n", nil, false},
		{"input-argument", "package p\nimport rego.v1\nallow if data.lib.f(input)\n", nil, false},
		{"reads-nothing", "package p\nimport rego.v1\nallow := true\nunused if input.a\n", nil, true},
		// A rule that only names a part of input (an alias) is read
		// through: reading a field of it reads that field alone, reading it
		// whole reads all of that part.
		{"alias-field", "package p\nimport rego.v1\nhttp := input.attributes.request.http\nallow if { http.method == \"GET\"; http.headers.x == \"y\" }\n",
			[]string{"attributes.request.http.headers.x", "attributes.request.http.method"}, true},
		{"alias-whole", "package p\nimport rego.v1\nhttp := input.attributes.request.http\nallow if { http.method == \"GET\"; count(http) > 1 }\n",
			[]string{"attributes.request.http", "attributes.request.http.method"}, true},
		{"alias-iterated", "package p\nimport rego.v1\nhttp := input.attributes.request.http\nallow if { some k, v in http; v == k }\n", []string{"attributes.request.http"}, true},
		{"alias-dynamic-key", "package p\nimport rego.v1\nhttp := input.attributes.request.http\nallow if http.headers[input.h] == \"y\"\n",
			[]string{"attributes.request.http.headers", "h"}, true},
		{"alias-of-alias", "package p\nimport rego.v1\nhttp := input.attributes.request.http\nh := http.headers\nallow if h.x == \"y\"\n", []string{"attributes.request.http.headers.x"}, true},
		{"alias-of-input", "package p\nimport rego.v1\nreq := input\nallow if req.user == \"a\"\n", []string{"user"}, true},
		{"alias-of-input-whole", "package p\nimport rego.v1\nreq := input\nallow if count(req) > 0\n", nil, false},
		{"alias-other-package", "package p\nimport rego.v1\nallow if data.lib.hdrs.x == \"y\"\n", []string{"attributes.request.http.headers.x"}, true},
		{"alias-in-document", "package p\nimport rego.v1\nallow if { x := data.lib; x.hdrs.z == \"q\" }\n", []string{"attributes.request.http.body", "attributes.request.http.headers"}, true},
		{"alias-is-entrypoint", "package p\nimport rego.v1\nallow := input.attributes.request.http\n", []string{"attributes.request.http"}, true},
		{"alias-replaced-with", "package p\nimport rego.v1\nhttp := input.attributes.request.http\nq if http.method == \"GET\"\nallow if q with data.p.http as {\"method\": \"GET\"}\n",
			[]string{"attributes.request.http", "attributes.request.http.method"}, true},
		{"not-alias-default", "package p\nimport rego.v1\ndefault http := {}\nhttp := input.attributes.request.http\nallow if http.method == \"GET\"\n", []string{"attributes.request.http"}, true},
		{"not-alias-condition", "package p\nimport rego.v1\nhttp := input.attributes.request.http if input.on\nallow if http.method == \"GET\"\n", []string{"attributes.request.http", "on"}, true},
		{"not-alias-dynamic", "package p\nimport rego.v1\nhttp := input.attributes.request.http[input.k]\nallow if http.method == \"GET\"\n", []string{"attributes.request.http", "k"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := compiler.Compile(context.Background(), compiler.Options{Modules: map[string]string{"p.rego": tt.module, "lib.rego": lib}, Entrypoints: []string{"p/allow"}})
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
			paths, known := rb.Manifest.InputPathsFor("p/allow", rb.Data)
			if known != tt.known {
				t.Fatalf("known = %v, want %v (%v)", known, tt.known, paths)
			}
			var got []string
			for _, p := range paths {
				got = append(got, strings.Join(p, "."))
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("paths = %v, want %v", got, tt.want)
			}
			// The policy's paths as a whole still count every rule: each
			// path the entrypoint reads lies under one of them.
			if all, ok := rb.Manifest.InputPaths(rb.Data); ok && known {
				for _, p := range paths {
					if !slices.ContainsFunc(all, func(a []string) bool { return len(a) <= len(p) && slices.Equal(a, p[:len(a)]) }) {
						t.Fatalf("all rules read %v, not the entrypoint's %v", all, p)
					}
				}
			}
			if _, ok := rb.Manifest.InputPathsFor("p/other", rb.Data); ok {
				t.Fatal("an entrypoint the manifest does not record has known paths")
			}
		})
	}
}
