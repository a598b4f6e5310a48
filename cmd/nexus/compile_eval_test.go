package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompileAndEval(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("policy/authz.rego", `package nexus.authz

default allow := false

allow if data.roles[input.user] == "admin"

info := {"user": input.user, "role": data.roles[input.user]}

never if false
`)
	write("policy/roles.json", `{"roles": {"bob": "admin", "eve": "viewer"}}`)
	write("bad/bad.rego", "package bad\n\nallow if {\n\tx :=\n}\n")
	bundle := filepath.Join(dir, "out", "bundle.tar.gz")
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		t.Fatal(err)
	}
	bobInput := write("bob.json", `{"user": "bob"}`)

	tests := []struct {
		name    string
		stdin   string
		args    []string
		want    string // substring of the output or error
		wantErr bool
	}{
		{name: "compile", args: []string{"compile", "-o", bundle, "-e", "nexus/authz/allow", "-e", "nexus/authz/info", "-e", "nexus/authz/never", "-r", "v1", filepath.Join(dir, "policy")}, want: "wrote " + bundle},
		{name: "eval allow", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/allow", "-i", bobInput}, want: "true\n"},
		{name: "eval object", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/info", "-i", "-"}, stdin: `{"user":"eve"}`, want: "\"role\": \"viewer\""},
		{name: "eval no input", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/allow"}, want: "false\n"},
		{name: "eval undefined", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/never"}, want: "undefined"},
		{name: "eval undefined fails", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/never", "--fail"}, want: "undefined", wantErr: true},
		{name: "eval bad input", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/allow", "-i", "-"}, stdin: `{"user":`, want: "invalid_input", wantErr: true},
		{name: "eval unknown entrypoint", args: []string{"eval", "-b", bundle, "-e", "nexus/authz/nope"}, want: "unknown entrypoint", wantErr: true},
		{name: "eval missing bundle", args: []string{"eval", "-b", filepath.Join(dir, "nope.tar.gz"), "-e", "x/y"}, want: "no such file", wantErr: true},
		{name: "compile error has location", args: []string{"compile", "-o", filepath.Join(dir, "bad.tar.gz"), "-e", "bad/allow", filepath.Join(dir, "bad")}, want: "bad.rego:5:1: ", wantErr: true},
		{name: "compile needs an entrypoint", args: []string{"compile", "-o", filepath.Join(dir, "x.tar.gz"), filepath.Join(dir, "policy")}, want: "ENTRYPOINT", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runNexus(t, tc.stdin, tc.args...)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v (output %q)", err, tc.wantErr, out)
			}
			text := out
			if err != nil {
				text += err.Error()
			}
			if !strings.Contains(text, tc.want) {
				t.Fatalf("output %q lacks %q", text, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.tar.gz")); !os.IsNotExist(err) {
		t.Fatalf("a failed compile left a bundle behind: %v", err)
	}
}
