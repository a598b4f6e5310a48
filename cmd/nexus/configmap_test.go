package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// configMapMount lays out a directory as the kubelet mounts a ConfigMap
// holding policy.rego: the file in a timestamped "..2026_..." directory,
// "..data" linked to that directory, and policy.rego linked through
// ..data.
func configMapMount(t *testing.T, policy string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policy")
	ts := "..2026_12_02_00_00_00.123456789"
	if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ts), "policy.rego", policy)
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "policy.rego"), filepath.Join(dir, "policy.rego")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRunConfigMapMount: opa-envoy-plugin's usual deployment, nexus run
// --ignore=.* with the policy directory mounted from a ConfigMap, loads
// the policy once and decides over real gRPC.
func TestRunConfigMapMount(t *testing.T) {
	dir := t.TempDir()
	policy := configMapMount(t, quickStartPolicy)
	config := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: 127.0.0.1:0\n    path: envoy/authz/allow\nnexus:\n  data_dir: "+filepath.Join(dir, "data")+"\n")
	p := startNexus(t, "run", "--server", "--config-file="+config, "--addr=127.0.0.1:0", "--diagnostic-addr=127.0.0.1:0", "--ignore=.*", policy)
	c := p.client(t)
	for _, tc := range []struct {
		method, path string
		allow        bool
	}{{"GET", "/people", true}, {"POST", "/people", false}, {"GET", "/admin", false}} {
		resp, err := c.Check(t.Context(), check(tc.method, tc.path, ""))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetStatus().GetCode() == int32(codes.OK); got != tc.allow {
			t.Errorf("%s %s: allowed %v, want %v", tc.method, tc.path, got, tc.allow)
		}
	}
}

// TestRunConfigMapMountWithoutIgnore: without --ignore nexus, like OPA,
// loads the mount's files three times and stops, naming the duplicates
// and the flag that skips them.
func TestRunConfigMapMountWithoutIgnore(t *testing.T) {
	dir := t.TempDir()
	policy := configMapMount(t, quickStartPolicy)
	config := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: 127.0.0.1:0\n    path: envoy/authz/allow\nnexus:\n  data_dir: "+filepath.Join(dir, "data")+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := newRootCmd()
	cmd.SetArgs([]string{"run", "--server", "--config-file=" + config, "--addr=127.0.0.1:0", "--diagnostic-addr=127.0.0.1:0", policy})
	cmd.SetOut(&fixture.SyncBuffer{})
	cmd.SetErr(&fixture.SyncBuffer{})
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		t.Fatal("nexus run started with every rule loaded three times")
	}
	for _, want := range []string{
		"multiple default rules data.envoy.authz.allow",
		filepath.Join(policy, "..data", "policy.rego"),
		filepath.Join(policy, "policy.rego") + ":",
		"--ignore=.*",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant it to contain %q", err, want)
		}
	}
}

// TestServeConfigMapMount: nexus serve takes the same patterns as
// --policy-ignore, or as policy_ignore in its configuration.
func TestServeConfigMapMount(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		flags  []string
	}{
		{name: "flag", flags: []string{"--policy-ignore=.*"}},
		{name: "configuration", config: "  policy_ignore: [\".*\"]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			policy := configMapMount(t, quickStartPolicy)
			config := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: 127.0.0.1:0\n    path: envoy/authz/allow\nnexus:\n"+tc.config)
			args := append([]string{"serve", "--config", config, "--policy", policy, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "-", "--admin-addr", "-"}, tc.flags...)
			c := startNexus(t, args...).client(t)
			resp, err := c.Check(t.Context(), check("GET", "/people", ""))
			if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
				t.Errorf("GET /people: %v, %v; want OK", resp, err)
			}
			resp, err = c.Check(t.Context(), check("POST", "/people", ""))
			if err != nil || resp.GetStatus().GetCode() == int32(codes.OK) {
				t.Errorf("POST /people: %v, %v; want a denial", resp, err)
			}
		})
	}
}
