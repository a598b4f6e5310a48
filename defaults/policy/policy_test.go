package policy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// TestWasmSHA256: the ways nexus compiles the embedded default policy
// (with the decision log's optional rules as `nexus serve` does, or
// without, whatever the data) give the module WasmSHA256 names, so the
// server recognises it; a changed policy does not.
func TestWasmSHA256(t *testing.T) {
	ctx := context.Background()
	mods, err := fixture.Modules(policy.FS)
	if err != nil {
		t.Fatal(err)
	}
	eps := []string{policy.EnvoyEntrypoint, policy.AuthzEntrypoint}
	for _, c := range []struct {
		name  string
		build func() ([]byte, error)
	}{
		{"compiled", func() ([]byte, error) {
			b, err := compiler.Compile(ctx, compiler.Options{Modules: mods, Entrypoints: eps, Revision: "a"})
			return wasmOf(b, err)
		}},
		{"compiled with the decision log's rules", func() ([]byte, error) {
			b, err := compiler.Compile(ctx, compiler.Options{Modules: mods, Entrypoints: eps, OptionalEntrypoints: []string{"system/log/mask", "system/log/drop"}, Revision: "b", Data: map[string]any{"x": 1}})
			return wasmOf(b, err)
		}},
	} {
		wasm, err := c.build()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		sum := sha256.Sum256(wasm)
		if got := hex.EncodeToString(sum[:]); got != policy.WasmSHA256 {
			t.Errorf("%s: the Wasm's SHA-256 is %s, policy.WasmSHA256 says %s: set it to the new digest once TestDefaultPolicyMatchesReference passes", c.name, got, policy.WasmSHA256)
		}
	}
	// A changed policy is not the default one.
	mods["envoy.rego"] = strings.Replace(mods["envoy.rego"], "default tenant_header := \"\"", "default tenant_header := \"acme\"", 1)
	b, err := compiler.Compile(ctx, compiler.Options{Modules: mods, Entrypoints: eps, Revision: "c"})
	wasm, err := wasmOf(b, err)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(wasm); hex.EncodeToString(sum[:]) == policy.WasmSHA256 {
		t.Error("a changed policy has the default policy's digest")
	}
}

func wasmOf(b *bundle.Bundle, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	return b.Wasm, nil
}
