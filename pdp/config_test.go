package pdp_test

import (
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*pdp.Config)
		wantErr string
	}{
		{"no-engine", func(c *pdp.Config) { c.Engine = nil }, "Engine is required"},
		{"no-store", func(c *pdp.Config) { c.Store = nil }, "Store is required"},
		{"no-policy", func(c *pdp.Config) { c.Policy = nil }, "Policy is required"},
		{"negative-body", func(c *pdp.Config) { c.MaxBodyBytes = -1 }, "MaxBodyBytes -1 is negative"},
		{"negative-cache", func(c *pdp.Config) { c.CacheSize = -5 }, "CacheSize -5 is negative"},
		{"negative-eval-timeout", func(c *pdp.Config) { c.EvalTimeout = -1 }, "EvalTimeout -1ns is negative"},
	}
	store := fixture.DemoStore(t)
	eng := fixture.StoreEngine(t, store)
	b := fixture.Bundle(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := pdp.Config{Engine: eng, Store: store, Policy: b}
			tt.mutate(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
