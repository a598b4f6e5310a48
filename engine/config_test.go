package engine_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/engine"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     engine.Config
		wantErr string
		check   func(t *testing.T, c engine.Config)
	}{
		{name: "zero value gets defaults", check: func(t *testing.T, c engine.Config) {
			if c.Logger == nil || c.Builtins == nil {
				t.Fatal("logger or registry not set")
			}
			if c.MaxInstances != runtime.GOMAXPROCS(0) || c.MemoryLimitPages != engine.DefaultMemoryLimitPages || c.MaxInstanceBytes != engine.DefaultMaxInstanceBytes {
				t.Fatalf("defaults: %+v", c)
			}
		}},
		{name: "discard threshold capped at the memory limit", cfg: engine.Config{MemoryLimitPages: 16, MaxInstanceBytes: 1 << 30}, check: func(t *testing.T, c engine.Config) {
			if c.MaxInstanceBytes != 16*65536 {
				t.Fatalf("MaxInstanceBytes = %d", c.MaxInstanceBytes)
			}
		}},
		{name: "negative instances", cfg: engine.Config{MaxInstances: -1}, wantErr: "MaxInstances"},
		{name: "memory beyond 4 GiB", cfg: engine.Config{MemoryLimitPages: 65537}, wantErr: "MemoryLimitPages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, tc.cfg)
		})
	}
}
