package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/extauthz"
)

func TestAdminToken(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	t.Run("generated-on-loopback-and-kept", func(t *testing.T) {
		t.Setenv("NEXUS_ADMIN_TOKEN", "")
		dir := t.TempDir()
		c := serveConfig{Server: extauthz.Config{AdminAddr: "127.0.0.1:8282"}, DataDir: dir}
		tok, file, err := adminToken(c, log)
		if err != nil || len(tok) != 64 || file != filepath.Join(dir, adminTokenFile) {
			t.Fatalf("adminToken = %q, %q, %v; want a 64-hex token in the data dir", tok, file, err)
		}
		st, err := os.Stat(file)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("token file mode %v, %v; want 0600", st.Mode(), err)
		}
		again, _, err := adminToken(c, log)
		if err != nil || again != tok {
			t.Fatalf("second start: %q, %v; want the same token", again, err)
		}
	})
	t.Run("non-loopback-needs-a-token", func(t *testing.T) {
		t.Setenv("NEXUS_ADMIN_TOKEN", "")
		_, _, err := adminToken(serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282"}, DataDir: t.TempDir()}, log)
		if err == nil || !strings.Contains(err.Error(), "--admin-insecure") {
			t.Fatalf("err = %v, want a refusal naming --admin-insecure", err)
		}
	})
	t.Run("insecure-is-explicit", func(t *testing.T) {
		t.Setenv("NEXUS_ADMIN_TOKEN", "")
		tok, _, err := adminToken(serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282", AdminInsecure: true}}, log)
		if err != nil || tok != "" {
			t.Fatalf("adminToken = %q, %v; want an open admin API", tok, err)
		}
	})
	t.Run("env-and-file", func(t *testing.T) {
		t.Setenv("NEXUS_ADMIN_TOKEN", "from-env")
		if tok, _, err := adminToken(serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282"}}, log); err != nil || tok != "from-env" {
			t.Fatalf("env: %q, %v", tok, err)
		}
		f := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(f, []byte("from-file\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if tok, _, err := adminToken(serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282"}, AdminTokenFile: f}, log); err != nil || tok != "from-file" {
			t.Fatalf("file: %q, %v", tok, err)
		}
	})
}

// TestServeHelpHidesToken: the help never prints a token's value, even
// when $NEXUS_ADMIN_TOKEN is set.
func TestServeHelpHidesToken(t *testing.T) {
	t.Setenv("NEXUS_ADMIN_TOKEN", "sup3r-s3cret")
	cmd := newServeCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sup3r-s3cret") || !strings.Contains(out.String(), "--admin-token") {
		t.Fatalf("help shows the token or lacks the flag:\n%s", out.String())
	}
}
