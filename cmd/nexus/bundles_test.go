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
	"os"
	"path/filepath"
	"strings"
	"testing"

	opabundle "github.com/open-policy-agent/opa/v1/bundle"
	opakeys "github.com/open-policy-agent/opa/v1/keys"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/opaconfig"
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

func TestReadOPABundles(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "opa.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := readOPABundles(write(`
services:
  acme:
    url: http://127.0.0.1:1
bundles:
  authz:
    service: acme
    resource: bundles/authz.tar.gz
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := startBundles(t.Context(), cfg, dir, []string{"envoy/authz/allow"}, "", slog.New(slog.DiscardHandler), func(context.Context, *bundle.Bundle) error { return nil })
	if err != nil || s == nil {
		t.Fatalf("startBundles: %v", err)
	}
	if st := s.Status(); len(st) != 1 || st[0].Name != "authz" {
		t.Fatalf("status %+v", st)
	}

	_, err = readOPABundles(write("services: {}\ndecision_logs:\n  console: true\nplugins: {}\n"))
	if !errors.Is(err, opaconfig.ErrUnsupported) || !strings.Contains(err.Error(), "decision_logs, plugins") {
		t.Fatalf("other sections: %v", err)
	}
}
