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

// TestScrubFindsForgedUser runs the real nexus on a data file in which
// one byte of a key was changed (user:u5 became user:u9 in the
// object-first index): with the scrub off the decision that reads the key
// finds that it no longer matches its checksum; with a short scrub interval
// the scrub finds the damage before any decision reads it. Either way
// /readyz answers 503 with the reason, the corruption metric is 1, writes
// are refused and the forged user is not allowed.
func TestScrubFindsForgedUser(t *testing.T) {
	dir := t.TempDir()
	bin := nexusproc.Binary(t)
	data := filepath.Join(dir, "data")
	httpAddr, adminAddr := nexusproc.FreeAddr(t), nexusproc.FreeAddr(t)
	args := []string{"serve", "--grpc-addr", "-", "--http-addr", httpAddr, "--admin-addr", adminAddr,
		"--data-dir", data, "--admin-insecure", "--app-api-insecure"}
	post := func(url, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	allowed := func(user string) (int, string) {
		t.Helper()
		return post("http://"+httpAddr+"/access/v1/evaluation",
			`{"subject":{"type":"user","id":"`+user+`"},"action":{"name":"read"},"resource":{"type":"folder","id":"vault"}}`)
	}
	stop := func(p *nexusproc.Proc) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Fatalf("stop: %v\n%s", err, p.Output)
		}
	}

	p := nexusproc.Start(t, dir, adminAddr, append(args, "--scrub-interval", "0")...)
	if code, body := post("http://"+adminAddr+"/v1/relationships", `{"touches":["folder:vault#viewer@user:u5","folder:other#viewer@user:u9","folder:vault#tenant@tenant:acme","folder:other#tenant@tenant:acme"]}`); code != http.StatusOK {
		t.Fatalf("write: %d %s", code, body)
	}
	stop(p)

	// u9 holds a tuple of its own, so that a decision reads the object's
	// tuples for it rather than finding at once that u9 holds nothing.
	// Forge: change u5 to u9 in the object-first key of the tuple. The
	// key ends "vault" 0x00, three one-byte varints, "u5"; a stale copy
	// of its page may hold the same bytes, so the forged copy is the one
	// the store (read offline) reads for user:u9.
	file := filepath.Join(data, "relations.db")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	forged := false
	for i := 0; !forged; i++ {
		j := bytes.Index(b[i:], []byte("vault\x00"))
		if j < 0 {
			break
		}
		i += j
		if i+11 > len(b) || string(b[i+9:i+11]) != "u5" {
			continue
		}
		b[i+10] = '9'
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		b[i+10] = '5'
		out, _ := exec.Command(bin, "rel", "check", "--data-dir", data, "folder:vault", "read", "user:u9").CombinedOutput()
		forged = strings.HasPrefix(strings.TrimSpace(string(out)), "allowed") || strings.Contains(string(out), "does not match its checksum")
	}
	if !forged {
		t.Fatal("no copy of the key forges user:u9")
	}

	waitDamage := func(what string, out func() string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			resp, err := http.Get("http://" + adminAddr + "/readyz")
			if err == nil {
				var rb bytes.Buffer
				_, _ = rb.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(rb.String(), "store_corrupt") {
					t.Logf("readyz (%s): %s", what, rb.String())
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz did not report the damage (%s) within 60s\n%s", what, out())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// With the scrub off, the decision that reads the forged key finds it:
	// u9 is not allowed and the server is no longer ready.
	p = nexusproc.Start(t, dir, adminAddr, append(args, "--scrub-interval", "0")...)
	if code, body := allowed("u9"); strings.Contains(body, `"decision":true`) {
		t.Fatalf("with the scrub off the forged user got %d %s", code, body)
	}
	waitDamage("read", p.Output.String)
	if code, body := post("http://"+adminAddr+"/v1/relationships", `{"touches":["folder:vault#viewer@user:u7"]}`); code < 400 {
		t.Errorf("a write after a read found the damage answered %d %s", code, body)
	}
	stop(p)

	// With a short interval the scrub finds it.
	cmd := exec.Command(bin, append(args, "--scrub-interval", "100ms")...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitDamage("scrub", out.String)
	for _, u := range []string{"u9", "u5"} {
		if code, body := allowed(u); strings.Contains(body, `"decision":true`) {
			t.Errorf("after the scrub found the damage %s got %d %s", u, code, body)
		}
	}
	if code, body := post("http://"+adminAddr+"/v1/relationships", `{"touches":["folder:vault#viewer@user:u7"]}`); code < 400 {
		t.Errorf("a write after the damage was found answered %d %s", code, body)
	}
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var mb bytes.Buffer
	_, _ = mb.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(mb.String(), "nexus_datastore_corrupt 1") {
		t.Errorf("the metrics do not say the store is corrupt")
	}
}
