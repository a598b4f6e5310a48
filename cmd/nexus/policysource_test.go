package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/compile"

	"github.com/nexuspdp/nexus/pdp"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// opaBuildBundle writes the bundle `opa build --bundle dir` writes (OPA's
// compile package, the code behind the command, and its bundle writer) and
// returns its path.
func opaBuildBundle(t *testing.T, dir string) string {
	t.Helper()
	archive := fixture.OPABuild(t, dir, compile.TargetRego)
	p := filepath.Join(t.TempDir(), "opa-bundle.tar.gz")
	if err := os.WriteFile(p, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var envoyPolicy = map[string]string{
	".manifest": `{"revision": "opa-7", "roots": ["nexus", "users"]}`,
	"nexus/policy.rego": `package nexus

envoy.result := {"allowed": data.users[input.attributes.request.http.headers["x-user"]].active}

authz.decision := {"allow": data.users[input.subject.id].active}
`,
	"users/data.json": `{"ann": {"active": true}, "ben": {"active": false}}`,
}

func TestLoadPolicySources(t *testing.T) {
	src := fixture.WriteTree(t, envoyPolicy)
	archive := opaBuildBundle(t, src)
	tests := []struct {
		name     string
		c        serveConfig
		revision string
		eps      []string
	}{
		{"OPA bundle, the default entrypoints", serveConfig{Core: pdp.Config{EnvoyEntrypoint: pdp.DefaultEnvoyEntrypoint, AuthzEntrypoint: pdp.DefaultAuthzEntrypoint}, Policy: archive}, "opa-7", []string{"nexus/envoy/result", "nexus/authz/decision"}},
		{"OPA bundle, one entrypoint disabled", serveConfig{Core: pdp.Config{EnvoyEntrypoint: pdp.DefaultEnvoyEntrypoint, AuthzEntrypoint: pdp.Disabled}, Policy: archive}, "opa-7", []string{"nexus/envoy/result"}},
		{"single .rego file", serveConfig{Policy: filepath.Join(src, "nexus", "policy.rego"), Entrypoints: []string{"nexus/authz/decision"}}, "", []string{"nexus/authz/decision"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := loadPolicy(t.Context(), tt.c)
			if err != nil {
				t.Fatalf("loadPolicy: %v", err)
			}
			if b.Manifest.Revision != tt.revision || !slices.Equal(b.Manifest.Entrypoints, tt.eps) {
				t.Fatalf("revision %q, entrypoints %v; want %q, %v", b.Manifest.Revision, b.Manifest.Entrypoints, tt.revision, tt.eps)
			}
		})
	}
}

func TestEvalPolicySources(t *testing.T) {
	src := fixture.WriteTree(t, envoyPolicy)
	archive := opaBuildBundle(t, src)
	input := `{"subject": {"id": "ann"}}`
	for _, tt := range []struct {
		name, policy, want string
		wantErr            bool
	}{
		{"OPA bundle", archive, `"allow": true`, false},
		{"directory", src, `"allow": true`, false},
		{"rego file without its data", filepath.Join(src, "nexus", "policy.rego"), "undefined", false},
		{"bad archive", fixture.WriteTree(t, map[string]string{"x.tar.gz": "junk"}) + "/x.tar.gz", "x.tar.gz: bundle: invalid bundle: gzip", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runNexus(t, input, "eval", "-b", tt.policy, "-e", "nexus/authz/decision", "-i", "-")
			if (err != nil) != tt.wantErr || !strings.Contains(out, tt.want) {
				t.Fatalf("err = %v, output %q; want %q (error %v)", err, out, tt.want, tt.wantErr)
			}
		})
	}
}
