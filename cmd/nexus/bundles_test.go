package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	opakeys "github.com/open-policy-agent/opa/v1/keys"
	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/bundle"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
)

// TestCompileSignedVerifiedByOPA signs with `nexus compile --signing-key`
// and verifies with OPA's own bundle reader and verification config.
func TestCompileSignedVerifiedByOPA(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "authz.rego"), []byte("package nexus.authz\n\nallow if input.user == \"bob\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}))
	out := filepath.Join(dir, "bundle.tar.gz")

	if _, err := runNexus(t, "", "compile", "-o", out, "-e", "nexus/authz/allow", "-r", "s1",
		"--signing-key", keyFile, "--signing-alg", "ES256", "--signing-key-id", "ci", "--scope", "prod", filepath.Join(dir, "authz.rego")); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(scope string) error {
		vc := opabundle.NewVerificationConfig(map[string]*opakeys.Config{"ci": {Key: pub, Algorithm: "ES256"}}, "", scope, nil)
		_, err := opabundle.NewReader(bytes.NewReader(raw)).WithBundleVerificationConfig(vc).Read()
		return err
	}
	if err := verify("prod"); err != nil {
		t.Fatalf("OPA's verifier refused the bundle nexus compile signed: %v", err)
	}
	if err := verify("dev"); err == nil {
		t.Fatal("OPA's verifier accepted the signature for another scope")
	}
	// nexus still reads its signed bundle.
	b, err := bundle.Read(bytes.NewReader(raw))
	if err != nil || b.Manifest.Revision != "s1" {
		t.Fatalf("bundle.Read: %v", err)
	}

	if out, err := runNexus(t, "", "compile", "-o", filepath.Join(dir, "x.tar.gz"), "-e", "nexus/authz/allow", "--scope", "prod", filepath.Join(dir, "authz.rego")); err == nil || !strings.Contains(out, "need --signing-key") {
		t.Fatalf("--scope without a key: %v %q", err, out)
	}
}

// TestServeBundlesFromOPAConfig: serve's OPA configuration (read as
// nexus serve --config reads it) fetches an OPA bundle of Rego sources
// from a bundle server, compiled for serve's entrypoints.
func TestServeBundlesFromOPAConfig(t *testing.T) {
	dir := t.TempDir()
	// An OPA bundle of Rego sources, as opa build writes one.
	tarball := opaRegoBundle(t, "from-server", "package envoy.authz\n\nallow if input.user == \"bob\"\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/bundles/authz" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(tarball.Bytes())
	}))
	defer srv.Close()

	cfgFile := filepath.Join(dir, "config.yaml")
	raw := []byte("services:\n  acme:\n    url: " + srv.URL + "\nbundles:\n  authz:\n    service: acme\n    persist: true\nplugins:\n  envoy_ext_authz_grpc:\n    path: envoy/authz/allow\n")
	c, err := readOPAServeConfig(cfgFile, raw)
	if err != nil {
		t.Fatal(err)
	}
	c.DataDir = dir
	loaded := make(chan *bundle.Bundle, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := serveBundles(ctx, c, slog.New(slog.DiscardHandler), func(_ context.Context, b *bundle.Bundle) error {
		loaded <- b
		return nil
	})
	if err != nil || s == nil {
		t.Fatalf("serveBundles: %v", err)
	}
	var b *bundle.Bundle
	select {
	case b = <-loaded:
	case <-time.After(30 * time.Second):
		t.Fatalf("no bundle loaded; status %+v", s.Status())
	}
	if b.Manifest.Revision != "from-server" || !slices.Contains(b.Manifest.Entrypoints, "envoy/authz/allow") || len(b.Wasm) == 0 {
		t.Fatalf("loaded %+v", b.Manifest)
	}
	if _, err := os.Stat(filepath.Join(dir, "bundles", "authz", "bundle.tar.gz")); err != nil {
		// The bundle is persisted after it is loaded: wait for it.
		deadline := time.Now().Add(10 * time.Second)
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			_, err = os.Stat(filepath.Join(dir, "bundles", "authz", "bundle.tar.gz"))
		}
		if err != nil {
			t.Fatalf("not persisted under the data directory: %v", err)
		}
	}

	// Without a bundles section there is nothing to fetch.
	c2, err := readOPAServeConfig(cfgFile, []byte("plugins:\n  envoy_ext_authz_grpc: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := serveBundles(ctx, c2, slog.New(slog.DiscardHandler), nil); s != nil || err != nil {
		t.Fatalf("no bundles: %v %v", s, err)
	}
	// A bundles section nexus cannot honour stops serve.
	c3, err := readOPAServeConfig(cfgFile, []byte("services:\n  acme:\n    url: http://127.0.0.1:1\nbundles:\n  a:\n    service: acme\n  b:\n    service: acme\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := serveBundles(ctx, c3, slog.New(slog.DiscardHandler), nil); !errors.Is(err, opaconfig.ErrUnsupported) {
		t.Fatalf("two bundles: %v", err)
	}
}

// TestRunAwaitsFirstBundle: nexus run with a bundles section and no policy
// path (as opa run is started when a bundle server holds the policy)
// denies every check and is not ready until the first bundle is active,
// then decides with it.
func TestRunAwaitsFirstBundle(t *testing.T) {
	dir := t.TempDir()
	tarball := opaRegoBundle(t, "first", quickStartPolicy)
	var serving atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !serving.Load() || r.URL.Path != "/bundles/authz" {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(tarball.Bytes())
	}))
	defer srv.Close()
	config := writeFile(t, dir, "config.yaml", "services:\n  acme:\n    url: "+srv.URL+"\nbundles:\n  authz:\n    service: acme\n    polling:\n      min_delay_seconds: 1\n      max_delay_seconds: 1\nplugins:\n  envoy_ext_authz_grpc:\n    addr: 127.0.0.1:0\n    path: envoy/authz/allow\nnexus:\n  data_dir: "+filepath.Join(dir, "data")+"\n")
	p := startNexus(t, "run", "--server", "--config-file="+config, "--addr=127.0.0.1:0", "--diagnostic-addr=127.0.0.1:0")
	c := p.client(t)
	ctx := context.Background()
	allowed := func(method, path string) bool {
		t.Helper()
		resp, err := c.Check(ctx, check(method, path, ""))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus().GetCode() == int32(codes.OK)
	}
	if allowed("GET", "/people") {
		t.Fatal("allowed before any bundle was active")
	}
	if code, body := get(t, "http://"+p.addrs["diagnostic"]+"/health"); code != http.StatusInternalServerError || !strings.Contains(body, "waiting for the first policy bundle") {
		t.Fatalf("/health before the first bundle = %d %q", code, body)
	}
	serving.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := get(t, "http://"+p.addrs["diagnostic"]+"/health")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 30s after the bundle server answered\n%s", p.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !allowed("GET", "/people") || allowed("POST", "/people") {
		t.Fatal("the bundle's decisions are not in force")
	}
}

// opaRegoBundle is an OPA bundle of one Rego module under the root envoy,
// as opa build writes one.
func opaRegoBundle(t *testing.T, revision, rego string) *bytes.Buffer {
	t.Helper()
	var tarball bytes.Buffer
	ob := opabundle.Bundle{
		Manifest: opabundle.Manifest{Revision: revision, Roots: &[]string{"envoy"}},
		Modules:  []opabundle.ModuleFile{{URL: "/envoy/authz.rego", Path: "/envoy/authz.rego", Raw: []byte(rego)}},
		Data:     map[string]any{},
	}
	if err := opabundle.NewWriter(&tarball).Write(ob); err != nil {
		t.Fatal(err)
	}
	return &tarball
}
