package builtins_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// defaultPolicy is nexus' default policy compiled to Wasm, evaluated by
// an engine whose builtins read a store, on input documents.
type defaultPolicy struct{ eng *engine.Engine }

// Envoy evaluates the Envoy entrypoint on in; ok is false when the
// evaluation fails.
func (d *defaultPolicy) Envoy(ctx context.Context, in, dst []byte) ([]byte, bool) {
	out, err := d.eng.Eval(ctx, policy.EnvoyEntrypoint, in, dst)
	return out, err == nil
}

// Authz evaluates the application check entrypoint on in, as Envoy.
func (d *defaultPolicy) Authz(ctx context.Context, in, dst []byte) ([]byte, bool) {
	out, err := d.eng.Eval(ctx, policy.AuthzEntrypoint, in, dst)
	return out, err == nil
}

// defaultWasm compiles the default policy's Rego once per test binary.
var defaultWasm = sync.OnceValues(func() (*bundle.Bundle, error) {
	mods, err := fixture.Modules(policy.FS)
	if err != nil {
		return nil, err
	}
	return compiler.Compile(context.Background(), compiler.Options{
		Modules: mods, Revision: "test",
		Entrypoints: []string{policy.EnvoyEntrypoint, policy.AuthzEntrypoint},
	})
})

// newDefaultPolicy is the default policy over s, with data holding the
// route table t and the subject and tenant headers, as the server loads
// it. The engine is closed when the test ends.
func newDefaultPolicy(tb testing.TB, s builtins.Store, t *builtins.Table, subjectHeader, tenantHeader string) *defaultPolicy {
	tb.Helper()
	b, err := defaultWasm()
	if err != nil {
		tb.Fatal(err)
	}
	text, err := builtins.AppendTable(nil, *t)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := json.Marshal(map[string]any{"nexus": map[string]any{
		"route_table": string(text), "subject_header": subjectHeader, "tenant_header": tenantHeader,
	}})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	eng, err := builtins.NewEngine(ctx, s, engine.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = eng.Close(ctx) })
	if err := eng.Load(ctx, &bundle.Bundle{Manifest: b.Manifest, Wasm: b.Wasm, Data: data}); err != nil {
		tb.Fatal(err)
	}
	return &defaultPolicy{eng: eng}
}
