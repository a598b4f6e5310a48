package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bench/internal/labtest"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/pdp"
)

// exitOf runs nexus-bench and returns its output and exit status.
func exitOf(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		errOut.WriteString(err.Error())
		return out.String() + errOut.String(), cli.ExitCode(err)
	}
	return out.String() + errOut.String(), cli.ExitOK
}

// TestWrongInvocationExits2: every kind of wrong invocation exits 2 and
// says what was wrong.
func TestWrongInvocationExits2(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown-command", []string{"go"}, `unknown command "go"`},
		{"unknown-flag", []string{"run", "--profil", "small"}, "unknown flag: --profil"},
		{"gate-no-file", []string{"gate"}, `required flag(s) "file" not set`},
		{"gate-bad-interface", []string{"gate", "--interface", "smtp", "--file", "x"}, `--interface "smtp"`},
		{"gate-bad-format", []string{"gate", "--file", "x", "--format", "csv"}, `--format "csv"`},
		{"bench-bad-profile", []string{"gen", "--profile", "huge", "--out", t.TempDir()}, `profile "huge"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := exitOf(t, tt.args...)
			if code != cli.ExitUsage || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want %d, with %q in:\n%s", code, cli.ExitUsage, tt.want, out)
			}
		})
	}
}

// TestGateForScripts runs nexus-bench gate against a real server: --format
// json, the exit status, and --api-key for the application interfaces.
func TestGateForScripts(t *testing.T) {
	b, err := labtest.DefaultBundle()
	if err != nil {
		t.Fatal(err)
	}
	srv := labtest.Start(t, labtest.DemoStore(t), b, pdp.Config{}, extauthz.Config{AdminAddr: "-", AppAPIKey: "gate-app-key-0123456789"})
	dir := t.TempDir()
	right := filepath.Join(dir, "right.ndjson")
	wrong := filepath.Join(dir, "wrong.ndjson")
	const alice = `{"user":"alice","action":"read","type":"file","id":"report.pdf","tenant":"acme","allow":true}` + "\n"
	const carol = `{"user":"carol","action":"read","type":"file","id":"report.pdf","tenant":"acme","allow":false}` + "\n"
	const carolWrong = `{"user":"carol","action":"read","type":"file","id":"report.pdf","tenant":"acme","allow":true}` + "\n"
	if err := os.WriteFile(right, []byte(alice+carol), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrong, []byte(alice+carolWrong), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := srv.GRPCAddr(), srv.HTTPAddr()
	type answer struct {
		File      string `json:"file"`
		Interface string `json:"interface"`
		Passed    bool   `json:"passed"`
		Checks    int    `json:"checks"`
		Right     int    `json:"right"`
		Wrong     []struct {
			Line  int    `json:"line"`
			Got   bool   `json:"got"`
			Error string `json:"error"`
		} `json:"wrong"`
	}
	tests := []struct {
		name      string
		args      []string
		env       string
		code      int
		right     int
		wrongLine int
		wrongErr  string
	}{
		{"grpc", []string{"--target", grpcAddr, "--file", right}, "", cli.ExitOK, 2, 0, ""},
		{"grpc-wrong", []string{"--target", grpcAddr, "--file", wrong}, "", cli.ExitFailure, 1, 2, ""},
		{"allowed-key", []string{"--target", httpAddr, "--interface", "allowed", "--api-key", "gate-app-key-0123456789", "--file", right}, "", cli.ExitOK, 2, 0, ""},
		{"authzen-key-from-env", []string{"--target", httpAddr, "--interface", "authzen", "--file", right}, "gate-app-key-0123456789", cli.ExitOK, 2, 0, ""},
		{"allowed-no-key", []string{"--target", httpAddr, "--interface", "allowed", "--file", right}, "", cli.ExitFailure, 0, 1, "401"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NEXUS_APP_API_KEY", tt.env)
			out, code := exitOf(t, append([]string{"gate", "--format", "json"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			line, _, _ := strings.Cut(out, "\n")
			var a answer
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatalf("not one line of JSON: %v\n%s", err, out)
			}
			if a.Checks != 2 || a.Right != tt.right || a.Passed != (tt.code == cli.ExitOK) || a.File == "" || a.Interface == "" || a.Wrong == nil {
				t.Fatalf("answer %+v", a)
			}
			if tt.wrongLine != 0 && (a.Wrong[0].Line != tt.wrongLine || !strings.Contains(a.Wrong[0].Error, tt.wrongErr)) {
				t.Fatalf("wrong %+v, want line %d with error %q", a.Wrong, tt.wrongLine, tt.wrongErr)
			}
		})
	}
}
