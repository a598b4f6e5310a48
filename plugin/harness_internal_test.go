package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
)

// buildModule builds the Go module in testdata/name for wasip1.
func buildModule(t *testing.T, name string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestrictedPhases checks the harness refuses, as Envoy does, a proxy_*
// call during _initialize and inside proxy_on_memory_allocate, and serves it
// when Lenient.
func TestRestrictedPhases(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two Wasm modules")
	}
	ctx := context.Background()
	tests := []struct {
		name    string
		module  string
		refused string
		start   bool // the refusal comes in StartPlugin, not newHost
	}{
		{"call during _initialize", "initcall", "env.proxy_set_tick_period_milliseconds during _initialize", false},
		{"call during allocation", "alloccall", "env.proxy_set_tick_period_milliseconds during proxy_on_memory_allocate", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wasm := buildModule(t, tc.module)
			// On disk, shared with later runs: compiling a Go-built module is
			// the slow part of this test, above all under -race.
			cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(os.TempDir(), "nexus-plugin-wazero-cache"))
			if err != nil {
				cache = wazero.NewCompilationCache()
			}
			defer cache.Close(ctx)
			run := func(lenient bool) (*Host, error) {
				h, err := newHost(ctx, wasm, hostConfig{Lenient: lenient, Cache: cache})
				if err != nil || !tc.start {
					return h, err
				}
				_, _, err = h.StartPlugin(ctx, nil, []byte("{}"))
				return h, err
			}
			h, err := run(false)
			if err == nil || !strings.Contains(err.Error(), "restricted_callback") || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("strict host: error %v, want restricted_callback for %s", err, tc.refused)
			}
			if h != nil {
				if r := h.Refused(); len(r) != 1 {
					t.Fatalf("refused %v, want one call", r)
				}
				h.Close(ctx)
			}
			h, err = run(true)
			if err != nil {
				t.Fatalf("lenient host: %v", err)
			}
			h.Close(ctx)
		})
	}
}
