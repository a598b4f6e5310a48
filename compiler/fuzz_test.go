package compiler_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/compiler"
)

// FuzzCompileRego feeds random source to the compiler: errors, never panics.
func FuzzCompileRego(f *testing.F) {
	f.Add(policy)
	f.Add("package p\n\nallow if { some x in input.xs; x > 1 }\n")
	f.Add("package p\nimport rego.v1\nf(x) := y if { y := sprintf(\"%v\", [x]) }\n")
	f.Add("package p\n\nallow if nexus.check(input.o, \"read\", input.s)\n")
	f.Add("package")
	f.Fuzz(func(t *testing.T, src string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := compiler.Compile(ctx, compiler.Options{
			Modules:     map[string]string{"fuzz.rego": src},
			Entrypoints: []string{"p/allow"},
		})
		if err == nil && (b == nil || len(b.Wasm) == 0) {
			t.Fatal("no error and no module")
		}
	})
}

// FuzzReadBundle feeds random archives to ReadBundle: errors, never panics.
func FuzzReadBundle(f *testing.F) {
	b := &compiler.Bundle{Manifest: compiler.Manifest{Revision: "r", Entrypoints: []string{"a/b"}}, Wasm: []byte("\x00asm\x01\x00\x00\x00"), Data: []byte(`{"x":1}`)}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := compiler.ReadBundle(bytes.NewReader(raw))
		if err != nil {
			return
		}
		if len(got.Manifest.Entrypoints) == 0 || len(got.Wasm) < 8 {
			t.Fatalf("accepted an incomplete bundle: %+v", got.Manifest)
		}
		// What was read can be written and read again.
		var out bytes.Buffer
		if err := got.Write(&out); err != nil {
			t.Fatal(err)
		}
		if _, err := compiler.ReadBundle(&out); err != nil {
			t.Fatalf("re-read: %v", err)
		}
	})
}
