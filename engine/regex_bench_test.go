package engine_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/nexuspdp/nexus/engine"
)

// BenchmarkRegexMatch: a route pattern matched against the request's path,
// the same path again and again (the call's answer is kept) and 4,096
// distinct paths. OPA's Wasm runtime compiled the pattern on every call;
// the host keeps it compiled, as OPA's evaluator does.
func BenchmarkRegexMatch(b *testing.B) {
	mod := "package p\n\nallow if regex.match(`^/api/v[0-9]+/users/[a-z0-9-]+$`, input.path)\n"
	bun := compileModules(b, map[string]string{"p.rego": mod}, nil, "p/allow")
	e := newEngine(b, engine.Config{}, bun)
	ctx := context.Background()
	b.Run("same", func(b *testing.B) {
		in := []byte(`{"path":"/api/v1/users/alice-1"}`)
		for b.Loop() {
			if _, err := e.Eval(ctx, "p/allow", in, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("distinct", func(b *testing.B) {
		ins := make([][]byte, 4096)
		for i := range ins {
			ins[i] = []byte(fmt.Sprintf(`{"path":"/api/v1/users/u-%s"}`, strconv.Itoa(i)))
		}
		i := 0
		for b.Loop() {
			i++
			if _, err := e.Eval(ctx, "p/allow", ins[i%len(ins)], nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMemoHits: sixteen glob.match calls an evaluation, each one a
// hit in the instance's memo of pure builtins' results (the same
// patterns and path as the evaluation before): what a host call costs
// when its answer is kept.
func BenchmarkMemoHits(b *testing.B) {
	mod := "package p\n\ndefault allow := false\n\nallow if {\n\tsome pattern in data.patterns\n\tglob.match(pattern, [\"/\"], input.path)\n}\n"
	patterns := make([]string, 16)
	for i := range patterns {
		patterns[i] = fmt.Sprintf("/api/v1/r%d/*/items/**", i)
	}
	bun := compileModules(b, map[string]string{"p.rego": mod}, map[string]any{"patterns": patterns}, "p/allow")
	e := newEngine(b, engine.Config{}, bun)
	ctx := context.Background()
	in := []byte(`{"path":"/api/v2/projects/nexus/builds/812/logs"}`)
	for b.Loop() {
		if _, err := e.Eval(ctx, "p/allow", in, nil); err != nil {
			b.Fatal(err)
		}
	}
}
