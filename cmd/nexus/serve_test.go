package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"
)

func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("grpc_addr: 0.0.0.0:9999\ndata_dir: /var/lib/nexus\ncache_size: 42\ncache_nondeterministic: true\ngrpc_tls:\n  cert_file: c.pem\n  key_file: k.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("grpc_adr: 0.0.0.0:9999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readServeConfig(bad); err == nil || !strings.Contains(err.Error(), "grpc_adr") {
		t.Fatalf("a misspelt key: err = %v, want one naming grpc_adr", err)
	}

	cmd := newServeCmd()
	if err := cmd.ParseFlags([]string{"--data-dir", "/tmp/flag-wins"}); err != nil {
		t.Fatal(err)
	}
	var c serveConfig
	// The flags' values as cobra parsed them.
	c.Server.GRPCAddr, _ = cmd.Flags().GetString("grpc-addr")
	c.DataDir, _ = cmd.Flags().GetString("data-dir")
	c.Core.CacheSize, _ = cmd.Flags().GetInt("cache-size")
	file, err := readServeConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	mergeFlags(cmd, &c, file)
	if c.Server.GRPCAddr != "0.0.0.0:9999" || c.Core.CacheSize != 42 || !c.Core.CacheNondeterministic || c.Server.GRPCTLS.CertFile != "c.pem" {
		t.Fatalf("file values not applied: %+v", c)
	}
	if c.DataDir != "/tmp/flag-wins" {
		t.Fatalf("data_dir = %q: a flag set on the command line must override the file", c.DataDir)
	}
}

// TestServeFlagsOverFile: every kind of flag given on the command line
// (a string, a number, a duration, a list; of the decision core, of the
// server, of the command) wins over the file, and the file over the
// flags' defaults.
func TestServeFlagsOverFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nexus.yaml")
	yaml := "http_addr: 0.0.0.0:1\nadmin_addr: 0.0.0.0:2\ncache_size: 42\neval_timeout: 2s\nmax_conns: 9\nentrypoints: [a/b]\nlog_level: warn\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := readServeConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := newServeCmd()
	args := []string{"--http-addr", "127.0.0.1:8", "--cache-size", "7", "--eval-timeout", "3s", "-e", "c/d,e/f", "--no-cache"}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	var c serveConfig
	addServeFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError), &c) // the flags' defaults
	mergeFlags(cmd, &c, file)
	switch {
	case c.Server.HTTPAddr != "127.0.0.1:8", c.Core.CacheSize != 7, c.Core.EvalTimeout != 3*time.Second,
		!slices.Equal(c.Entrypoints, []string{"c/d", "e/f"}), !c.Core.CacheDisabled:
		t.Fatalf("flags must override the file: %+v", c)
	case c.Server.AdminAddr != "0.0.0.0:2", c.Server.Limits.MaxConns != 9, c.LogLevel != "warn":
		t.Fatalf("the file must override the defaults: %+v", c)
	case c.Server.GRPCAddr != extauthz.DefaultGRPCAddr, c.Core.MaxBodyBytes != pdp.DefaultMaxBodyBytes:
		t.Fatalf("neither set: the defaults must stay: %+v", c)
	}
}

func TestParseLevel(t *testing.T) {
	if _, err := parseLevel("loud"); err == nil {
		t.Fatal("an unknown log level was accepted")
	}
	if l, err := parseLevel("debug"); err != nil || l.String() != "DEBUG" {
		t.Fatalf("debug: %v %v", l, err)
	}
}

func TestLoadPolicy(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	rego := "package nexus.authz\nimport rego.v1\ndecision := {\"allow\": input.subject.id == \"root\", \"reason\": \"custom\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(rego), 0o600); err != nil {
		t.Fatal(err)
	}
	c := serveConfig{Policy: dir, Entrypoints: []string{"nexus/authz/decision"}}
	b, err := loadPolicy(ctx, c)
	if err != nil {
		t.Fatalf("policy directory: %v", err)
	}
	bundlePath := filepath.Join(t.TempDir(), "b.tar.gz")
	f, err := os.Create(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b2, err := loadPolicy(ctx, serveConfig{Policy: bundlePath})
	if err != nil {
		t.Fatalf("policy bundle: %v", err)
	}
	if len(b2.Manifest.Entrypoints) != 1 || b2.Manifest.Entrypoints[0] != "nexus/authz/decision" {
		t.Fatalf("entrypoints %v", b2.Manifest.Entrypoints)
	}
	if _, err := loadPolicy(ctx, serveConfig{Policy: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("a missing policy path was accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad.tar.gz")
	if err := os.WriteFile(bad, []byte("not a bundle"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadPolicy(ctx, serveConfig{Policy: bad}); err == nil || !strings.Contains(err.Error(), "bad.tar.gz") {
		t.Fatalf("a corrupt bundle: err = %v, want one naming the file", err)
	}
	def, err := loadPolicy(ctx, serveConfig{Core: pdp.Config{EnvoyEntrypoint: "nexus/envoy/result", AuthzEntrypoint: "nexus/authz/decision"}})
	if err != nil || !slices.Contains(def.Manifest.Entrypoints, "nexus/envoy/result") || !slices.Contains(def.Manifest.Entrypoints, "nexus/authz/decision") {
		t.Fatalf("embedded default: entrypoints %v, err %v", def.Manifest.Entrypoints, err)
	}
}
