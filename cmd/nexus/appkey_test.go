package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"
)

func TestAppAPIKey(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	keyFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(keyFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		env       string
		c         serveConfig
		want      string // "generated": 64 hex digits in the data directory
		wantErr   string
		wantInDir bool
	}{
		{name: "flag", c: serveConfig{Server: extauthz.Config{AppAPIKey: "from-flag"}, AppAPIKeyFile: keyFile}, env: "from-env", want: "from-flag"},
		{name: "file", c: serveConfig{AppAPIKeyFile: keyFile}, env: "from-env", want: "from-file"},
		{name: "env", c: serveConfig{Server: extauthz.Config{HTTPAddr: "0.0.0.0:8181"}}, env: "from-env", want: "from-env"},
		{name: "empty-file", c: serveConfig{AppAPIKeyFile: emptyFile}, wantErr: "is empty"},
		{name: "missing-file", c: serveConfig{AppAPIKeyFile: emptyFile + ".nope"}, wantErr: "no such file"},
		{name: "insecure", c: serveConfig{Server: extauthz.Config{HTTPAddr: "0.0.0.0:8181", AppAPIInsecure: true}}, want: ""},
		{name: "key-wins-over-insecure", c: serveConfig{Server: extauthz.Config{AppAPIKey: "k", AppAPIInsecure: true}}, want: "k"},
		{name: "no-http-listener", c: serveConfig{Server: extauthz.Config{HTTPAddr: "-"}}, want: ""},
		{name: "generated-on-loopback", c: serveConfig{Server: extauthz.Config{HTTPAddr: "127.0.0.1:8181"}}, want: "generated"},
		// Not refused: the proxies' endpoints on the listener need no key.
		{name: "generated-on-any-address", c: serveConfig{Server: extauthz.Config{HTTPAddr: "0.0.0.0:8181"}}, want: "generated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NEXUS_APP_API_KEY", tt.env)
			dir := t.TempDir()
			tt.c.DataDir = dir
			key, file, err := appAPIKey(tt.c, log)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "generated" {
				if key != tt.want || file != "" {
					t.Fatalf("key %q from %q, want %q", key, file, tt.want)
				}
				return
			}
			if len(key) != 64 || file != filepath.Join(dir, appAPIKeyFile) {
				t.Fatalf("key %q in %q, want 64 hex digits in the data directory", key, file)
			}
			if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("key file mode %v, %v; want 0600", st.Mode(), err)
			}
			if again, _, err := appAPIKey(tt.c, log); err != nil || again != key {
				t.Fatalf("second start: %q, %v; want the same key", again, err)
			}
		})
	}
}

// TestServeRefusesAppKeyEqualToAdminToken: one secret for both APIs would
// hand applications the admin API.
func TestServeRefusesAppKeyEqualToAdminToken(t *testing.T) {
	dir := t.TempDir()
	c := serveConfig{
		Server: extauthz.Config{
			GRPCAddr: "-", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
			AdminToken: "same-secret-0123456789", AppAPIKey: "same-secret-0123456789",
		},
		Core:    pdp.Config{EnvoyEntrypoint: "nexus/envoy/result", AuthzEntrypoint: "nexus/authz/decision"},
		DataDir: dir, LogLevel: "error",
	}
	err := runServe(context.Background(), c, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "may not be the admin token") {
		t.Fatalf("runServe = %v, want a refusal", err)
	}
}

// TestServeHelpHidesAppKey: the help never prints the key's value.
func TestServeHelpHidesAppKey(t *testing.T) {
	t.Setenv("NEXUS_APP_API_KEY", "sup3r-s3cret-app")
	cmd := newServeCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sup3r-s3cret-app") || !strings.Contains(out.String(), "--app-api-key") || !strings.Contains(out.String(), "--app-api-insecure") {
		t.Fatalf("help shows the key or lacks the flags:\n%s", out.String())
	}
}
