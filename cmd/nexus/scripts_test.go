package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/internal/cli"
)

// exitOf runs nexus and returns its output and exit status.
func exitOf(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	out, err := runNexus(t, stdin, args...)
	if err != nil {
		return out, cli.ExitCode(err)
	}
	return out, cli.ExitOK
}

// TestWrongInvocationExits2: every kind of wrong invocation, of every
// command, exits 2 and says what was wrong.
func TestWrongInvocationExits2(t *testing.T) {
	dd := "--data-dir=" + t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown-command", []string{"serv"}, `unknown command "serv" for "nexus"`},
		{"unknown-subcommand", []string{"rel", "chek"}, `unknown command "chek" for "nexus rel"`},
		{"unknown-sub-subcommand", []string{"rel", "schema", "show"}, `unknown command "show" for "nexus rel schema"`},
		{"unknown-flag", []string{"serve", "--grpc-adr", "x"}, "unknown flag: --grpc-adr"},
		{"unknown-root-flag", []string{"--verbose"}, "unknown flag: --verbose"},
		{"bad-flag-value", []string{"serve", "--cache-size", "many"}, `invalid argument "many"`},
		{"bad-log-level", []string{"serve", "--log-level", "loud"}, `log level "loud"`},
		{"serve-args", []string{"serve", "now"}, `unknown command "now" for "nexus serve"`},
		{"version-args", []string{"version", "2"}, `unknown command "2"`},
		{"eval-no-entrypoint", []string{"eval", "-b", "x.tar.gz"}, `required flag(s) "entrypoint" not set`},
		{"eval-bad-format", []string{"eval", "-b", "x.tar.gz", "-e", "a/b", "--format", "yaml"}, `--format "yaml": want pretty or json`},
		{"compile-no-entrypoint", []string{"compile", "dir"}, "ENTRYPOINT is required"},
		{"compile-no-path", []string{"compile", "-e", "a/b"}, "requires at least 1 arg(s)"},
		{"check-two-args", []string{"rel", "check", "file:x", "read", dd}, "accepts 3 arg(s), received 2"},
		{"check-bad-format", []string{"rel", "check", "--format", "xml", "file:x", "read", "user:a", dd}, `--format "xml"`},
		{"read-bad-format", []string{"rel", "read", "--format", "table", dd}, `--format "table"`},
		{"read-args", []string{"rel", "read", "file:x", dd}, `unknown command "file:x"`},
		{"write-no-tuple", []string{"rel", "write", dd}, "requires at least 1 arg(s)"},
		{"import-bad-format", []string{"rel", "import", "--format", "xml", "-", dd}, `"xml"`},
		{"export-bad-format", []string{"rel", "export", "--format", "xml", dd}, `"xml"`},
		{"convert-no-file", []string{"rel", "schema", "convert"}, "accepts 1 arg(s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := exitOf(t, "", tt.args...)
			if code != cli.ExitUsage || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want %d, with %q in:\n%s", code, cli.ExitUsage, tt.want, out)
			}
		})
	}
	// A group without a subcommand prints its help and succeeds.
	if out, code := exitOf(t, "", "rel"); code != cli.ExitOK || !strings.Contains(out, "Available Commands") {
		t.Fatalf("nexus rel: exit %d\n%s", code, out)
	}
}

func TestRelCheckAndReadForScripts(t *testing.T) {
	dd := "--data-dir=" + t.TempDir()
	for _, args := range [][]string{
		{"rel", "schema", "write", "../../defaults/drive/schema.yaml", dd},
		{"rel", "import", "../../defaults/drive/tuples.txt", dd},
	} {
		if out, err := runNexus(t, "", args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	tests := []struct {
		name string
		args []string
		code int
		want string // the whole output, or with "~" a substring of it
	}{
		{"allowed", []string{"rel", "check", "file:report.pdf", "read", "user:bob"}, cli.ExitOK, "allowed\n"},
		{"denied", []string{"rel", "check", "file:report.pdf", "read", "user:carol"}, cli.ExitOK, "denied\n"},
		{"denied-fails", []string{"rel", "check", "--fail-deny", "file:report.pdf", "read", "user:carol"}, cli.ExitDenied, "~denied: user:carol may not read file:report.pdf"},
		{"allowed-fail-deny", []string{"rel", "check", "--fail-deny", "file:report.pdf", "read", "user:bob"}, cli.ExitOK, "allowed\n"},
		{"json", []string{"rel", "check", "--format", "json", "file:report.pdf", "write", "user:bob"}, cli.ExitOK, `{"allowed":false}` + "\n"},
		{"json-fail-deny", []string{"rel", "check", "--format", "json", "--fail-deny", "file:report.pdf", "write", "user:bob"}, cli.ExitDenied, `~{"allowed":false}`},
		{"json-trace", []string{"rel", "check", "--format", "json", "--trace", "group:eng", "member", "user:dave"}, cli.ExitOK,
			`{"allowed":true,"trace":{"kind":"relation","object":"group:eng","name":"member","result":true,"children":[{"kind":"tuple","name":"group:eng#member@user:dave","result":true}]}}` + "\n"},
		{"unknown-permission", []string{"rel", "check", "file:report.pdf", "print", "user:bob"}, cli.ExitFailure, "~print"},
		{"read-json", []string{"rel", "read", "--format", "json", "--object", "file:report.pdf"}, cli.ExitOK,
			`{"tuples":["file:report.pdf#parent@folder:q3","file:report.pdf#tenant@tenant:acme"]}` + "\n"},
		{"read-json-empty", []string{"rel", "read", "--format", "json", "--subject", "user:nobody"}, cli.ExitOK, `{"tuples":[]}` + "\n"},
		{"read-pretty", []string{"rel", "read", "--object", "file:report.pdf", "--relation", "parent"}, cli.ExitOK, "file:report.pdf#parent@folder:q3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := exitOf(t, "", append(tt.args, dd)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			if want, ok := strings.CutPrefix(tt.want, "~"); ok {
				if !strings.Contains(out, want) {
					t.Fatalf("output lacks %q:\n%s", want, out)
				}
			} else if out != tt.want {
				t.Fatalf("output %q, want %q", out, tt.want)
			}
		})
	}
}

func TestEvalForScripts(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(`package p
import rego.v1
default allow := false
allow if input.user == "bob"
result := {"allowed": allow}
maybe := true if input.user == "bob"
number := 7
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "b.tar.gz")
	if out, err := runNexus(t, "", "compile", "-o", bundle, "-e", "p/allow", "-e", "p/result", "-e", "p/maybe", "-e", "p/number", dir); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"bool-json", `{"user":"bob"}`, []string{"-e", "p/allow", "--format", "json"}, cli.ExitOK, `{"result":true}` + "\n"},
		{"bool-deny", `{"user":"eve"}`, []string{"-e", "p/allow", "--fail-deny"}, cli.ExitDenied, "false\n"},
		{"object-deny-json", `{"user":"eve"}`, []string{"-e", "p/result", "--fail-deny", "--format", "json"}, cli.ExitDenied, `{"result":{"allowed":false}}` + "\n"},
		{"object-allow", `{"user":"bob"}`, []string{"-e", "p/result", "--fail-deny"}, cli.ExitOK, "{\n  \"allowed\": true\n}\n"},
		{"undefined-json", `{"user":"eve"}`, []string{"-e", "p/maybe", "--format", "json"}, cli.ExitOK, "{}\n"},
		{"undefined-deny", `{"user":"eve"}`, []string{"-e", "p/maybe", "--fail-deny"}, cli.ExitDenied, "undefined\n"},
		{"undefined-fail", `{"user":"eve"}`, []string{"-e", "p/maybe", "--fail"}, cli.ExitFailure, "undefined\n"},
		{"not-a-decision", `{}`, []string{"-e", "p/number", "--fail-deny"}, cli.ExitFailure, "7\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"eval", "-b", bundle, "-i", "-"}, tt.args...)
			out, err := runNexus(t, tt.stdin, args...)
			code := cli.ExitOK
			if err != nil {
				code = cli.ExitCode(err)
				out = strings.TrimSuffix(out, err.Error())
			}
			if code != tt.code || out != tt.want {
				t.Fatalf("exit %d, output %q; want %d, %q (err %v)", code, out, tt.code, tt.want, err)
			}
		})
	}
}
