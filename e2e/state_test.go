package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// TestAdminPolicySurvivesRestart loads a policy with PUT /v1/policy on a
// single node, restarts nexus on the same data directory and finds that
// policy deciding; then damages the saved file and finds that nexus
// refuses to start rather than fall back to the embedded policy.
func TestAdminPolicySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	bin := nexusproc.Binary(t)
	src := filepath.Join(dir, "src")
	writeFile(t, filepath.Join(src, "envoy.rego"), "package nexus.envoy\n\ndefault result := false\n\nresult if input.attributes.request.http.path == \"/open\"\n")
	writeFile(t, filepath.Join(src, "authz.rego"), "package nexus.authz\n\ndefault decision := false\n")
	out := filepath.Join(dir, "admin.tar.gz")
	if b, err := exec.Command(bin, "compile", "-o", out, "-r", "admin-r1", "-e", "nexus/envoy/result", "-e", "nexus/authz/decision", src).CombinedOutput(); err != nil {
		t.Fatalf("nexus compile: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	httpAddr, adminAddr := nexusproc.FreeAddr(t), nexusproc.FreeAddr(t)
	args := []string{"serve", "--grpc-addr", "-", "--http-addr", httpAddr, "--admin-addr", adminAddr,
		"--data-dir", data, "--admin-insecure", "--app-api-insecure"}
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + httpAddr + "/ext_authz" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	stop := func(p *nexusproc.Proc) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Fatalf("stop: %v\n%s", err, p.Output)
		}
	}

	p := nexusproc.Start(t, dir, adminAddr, args...)
	if got := status("/open"); got != http.StatusForbidden {
		t.Fatalf("the embedded policy answered %d for /open, want 403", got)
	}
	req, err := http.NewRequest(http.MethodPut, "http://"+adminAddr+"/v1/policy", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/policy: %d", resp.StatusCode)
	}
	if got := status("/open"); got != http.StatusOK {
		t.Fatalf("the loaded policy answered %d for /open, want 200", got)
	}
	stop(p)

	p = nexusproc.Start(t, dir, adminAddr, args...)
	if got, closed := status("/open"), status("/closed"); got != http.StatusOK || closed != http.StatusForbidden {
		t.Fatalf("after a restart /open is %d and /closed %d, want 200 and 403 (the admin policy lost?)\n%s", got, closed, p.Output)
	}
	if !strings.Contains(p.Output.String(), "loaded through the admin API") || !strings.Contains(p.Output.String(), "admin-r1") {
		t.Errorf("the start does not say it uses the admin policy:\n%s", p.Output)
	}
	stop(p)

	// A damaged saved file fails the start, with an error that names it.
	saved := filepath.Join(data, "admin-policy.bundle")
	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-20] ^= 0x01
	if err := os.WriteFile(saved, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	outb, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("nexus started on a damaged saved policy:\n%s", outb)
	}
	if !strings.Contains(string(outb), "admin-policy.bundle is damaged") {
		t.Fatalf("the start failed without naming the damaged file: %v\n%s", err, outb)
	}
}
