package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// TestBundleServerSwap runs the real nexus against a local bundle server,
// as opa-envoy-plugin users run OPA: signed bundles built by `nexus
// compile --signing-key`, fetched with long polling; a new revision
// changes decisions while nexus runs, a tampered one is refused while the
// last good bundle keeps deciding, and that bundle, kept on disk, decides
// after a restart with the bundle server down.
func TestBundleServerSwap(t *testing.T) {
	dir := t.TempDir()
	bin := nexusproc.Binary(t)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "signing.pem")
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))

	// build compiles the policy opening one path, signed for scope prod.
	build := func(revision, openPath string) []byte {
		t.Helper()
		src := filepath.Join(dir, "src-"+revision)
		writeFile(t, filepath.Join(src, "envoy.rego"), "package nexus.envoy\n\ndefault result := false\n\nresult if input.attributes.request.http.path == data.open.path\n")
		writeFile(t, filepath.Join(src, "authz.rego"), "package nexus.authz\n\ndefault decision := false\n")
		writeFile(t, filepath.Join(src, "open", "data.json"), `{"path":"`+openPath+`"}`)
		out := filepath.Join(dir, revision+".tar.gz")
		cmd := exec.Command(bin, "compile", "-o", out, "-r", revision, "-e", "nexus/envoy/result", "-e", "nexus/authz/decision",
			"--signing-key", keyFile, "--scope", "prod", src)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nexus compile: %v\n%s", err, b)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	r1, r2 := build("r1", "/v1"), build("r2", "/v2")

	srv := &longPollServer{body: r1, etag: `"r1"`, changed: make(chan struct{})}
	hs := httptest.NewServer(srv)
	defer hs.Close()

	keys, err := json.Marshal(map[string]any{"default": map[string]string{"algorithm": "RS256", "key": pub}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "opa.yaml")
	// Polls an hour apart: only long polling can bring a new revision
	// within the test's deadlines.
	writeFile(t, cfg, fmt.Sprintf(`services:
  bundles:
    url: %s
bundles:
  authz:
    service: bundles
    resource: bundles/authz.tar.gz
    persist: true
    polling:
      min_delay_seconds: 3600
      max_delay_seconds: 3600
      long_polling_timeout_seconds: 20
    signing:
      scope: prod
keys: %s
`, hs.URL, keys))

	httpAddr, adminAddr := nexusproc.FreeAddr(t), nexusproc.FreeAddr(t)
	args := []string{"serve", "--config", cfg, "--grpc-addr", "-", "--http-addr", httpAddr, "--admin-addr", adminAddr,
		"--data-dir", filepath.Join(dir, "data"), "--app-api-insecure"}
	p := nexusproc.Start(t, dir, adminAddr, args...)
	pid := p.Cmd.Process.Pid

	status := func(path string) int {
		resp, err := http.Get("http://" + httpAddr + "/ext_authz" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// waitFor waits until the decisions are those of a revision.
	waitFor := func(open, closed string) {
		t.Helper()
		deadline := time.Now().Add(25 * time.Second)
		for status(open) != http.StatusOK || status(closed) != http.StatusForbidden {
			if time.Now().After(deadline) {
				t.Fatalf("%s is not the only open path after 25s", open)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("/v1", "/v2")

	srv.publish(r2, `"r2"`)
	waitFor("/v2", "/v1")

	// A bundle changed after signing is refused: r2 keeps deciding.
	tampered := retar(t, r2, func(name string, body []byte) []byte {
		if strings.HasSuffix(name, "data.json") {
			return []byte(`{"open":{"path":"/admin"}}`)
		}
		return body
	})
	seen := srv.publish(tampered, `"r3"`)
	// nexus asks one request at a time, and each request that names r2
	// gets the tampered bundle: the first later request that names
	// another ETag shows what nexus made of it (r3 had it been taken).
	deadline := time.Now().Add(25 * time.Second)
	for {
		after := srv.since(seen)
		if i := slices.IndexFunc(after, func(e string) bool { return e != `"r2"` }); i >= 0 {
			if after[i] == `"r3"` {
				t.Fatalf("nexus took the tampered bundle (If-None-Match %v)", after)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nexus did not ask again after the tampered bundle (If-None-Match %v)", after)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status("/admin") != http.StatusForbidden || status("/v2") != http.StatusOK {
		t.Fatal("the tampered bundle took effect")
	}
	if p.Cmd.ProcessState != nil || p.Cmd.Process.Pid != pid {
		t.Fatal("nexus restarted")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "bundles", "authz", "bundle.tar.gz")); err != nil {
		t.Fatalf("the last good bundle was not persisted: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Output.String())
	}
	if !strings.Contains(p.Output.String(), "bundle update failed") || !strings.Contains(p.Output.String(), "signature") {
		t.Fatalf("the refusal of the tampered bundle is not logged\n%s", p.Output.String())
	}

	// The bundle server goes away; restarted, nexus decides with the last
	// good bundle it kept, from its first request on.
	hs.Close()
	p = nexusproc.Start(t, dir, adminAddr, args...)
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if status("/v2") != http.StatusOK || status("/v1") != http.StatusForbidden || status("/admin") != http.StatusForbidden {
		t.Fatal("after a restart with the server down, the persisted r2 does not decide")
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Output.String())
	}
	if !strings.Contains(p.Output.String(), "loaded the persisted policy bundle") {
		t.Fatalf("the persisted bundle's load is not logged\n%s", p.Output.String())
	}
}

// longPollServer serves one bundle with its ETag and holds a request
// whose If-None-Match is current and that asks to wait, until a new
// bundle is published.
type longPollServer struct {
	mu      sync.Mutex
	body    []byte
	etag    string
	changed chan struct{}
	// ifNoneMatch is each request's If-None-Match, in arrival order.
	ifNoneMatch []string
}

// publish serves a new bundle and returns the number of requests seen
// so far.
func (s *longPollServer) publish(body []byte, etag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.body, s.etag = body, etag
	close(s.changed)
	s.changed = make(chan struct{})
	return len(s.ifNoneMatch)
}

// since returns the If-None-Match of the requests that arrived after the
// first n.
func (s *longPollServer) since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ifNoneMatch[n:]...)
}

func (s *longPollServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/bundles/authz.tar.gz" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.ifNoneMatch = append(s.ifNoneMatch, r.Header.Get("If-None-Match"))
	etag, ch := s.etag, s.changed
	s.mu.Unlock()
	if r.Header.Get("If-None-Match") == etag && strings.Contains(r.Header.Get("Prefer"), "wait=") {
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-time.After(20 * time.Second):
		}
	}
	s.mu.Lock()
	body, etag := s.body, s.etag
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/vnd.openpolicyagent.bundles")
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(body)
}

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// retar rewrites each file of a .tar.gz through edit.
func retar(t *testing.T, raw []byte, edit func(name string, body []byte) []byte) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		body = edit(hdr.Name, body)
		hdr.Size = int64(len(body))
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
