package engine_test

import (
	"context"
	"testing"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

// TestOptimizedBundleReadsData checks that optimisation does not fold rules
// that read data into constants: the same module gives new answers when only
// data.json changes.
func TestOptimizedBundleReadsData(t *testing.T) {
	for _, level := range []int{0, 1, 2} {
		b, err := compiler.Compile(context.Background(), compiler.Options{
			Modules:           map[string]string{"p.rego": "package p\n\ndefault allow := false\n\nallow if data.roles[input.user] == \"admin\"\n"},
			Data:              map[string]any{"roles": map[string]any{"bob": "admin"}},
			Entrypoints:       []string{"p/allow"},
			OptimizationLevel: level,
		})
		if err != nil {
			t.Fatalf("O%d: %v", level, err)
		}
		b.Data = []byte(`{"roles":{"eve":"admin"}}`)
		e := newEngine(t, engine.Config{MaxInstances: 1}, b)
		for user, want := range map[string]string{"eve": "true", "bob": "false"} {
			out, err := e.Eval(context.Background(), "p/allow", []byte(`{"user":"`+user+`"}`), nil)
			if err != nil || string(out) != want {
				t.Errorf("O%d: allow(%s) = %s, %v; want %s (data folded into the module?)", level, user, out, err, want)
			}
		}
	}
}
