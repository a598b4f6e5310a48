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
