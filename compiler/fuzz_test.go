package compiler_test

import (
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
