package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/internal/cli"
	"github.com/nexuspdp/nexus/internal/fixture"
)

const (
	unformattedRego = "package q\nallow    if {\ninput.x==1}\n"
	formattedRego   = "package q\n\nallow if {\n\tinput.x == 1\n}\n"
	v0Rego          = "package old\n\nallow {\n\tinput.x == 1\n}\n"
)

func TestFmtCommand(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string // written to a new directory
		args    []string          // DIR is replaced by the directory
		stdin   string
		code    int
		want    []string
		wantNot []string
		after   map[string]string // file contents afterwards
	}{
		{name: "to stdout", files: map[string]string{"q.rego": unformattedRego}, args: []string{"DIR/q.rego"}, want: []string{formattedRego}, after: map[string]string{"q.rego": unformattedRego}},
		{name: "list", files: map[string]string{"a/q.rego": unformattedRego, "ok.rego": formattedRego, "notes.txt": "x  y"}, args: []string{"-l", "DIR"}, want: []string{"a/q.rego"}, wantNot: []string{"ok.rego", "notes.txt", "package"}},
		{name: "diff", files: map[string]string{"q.rego": unformattedRego}, args: []string{"-d", "DIR"}, want: []string{"--- DIR/q.rego\n+++ DIR/q.rego (formatted)\n@@ -1,3 +1,5 @@\n package q\n-allow    if {\n-input.x==1}\n+\n+allow if {\n+\tinput.x == 1\n+}\n"}},
		{name: "write", files: map[string]string{"q.rego": unformattedRego, "ok.rego": formattedRego}, args: []string{"-w", "DIR"}, after: map[string]string{"q.rego": formattedRego, "ok.rego": formattedRego}, wantNot: []string{"package"}},
		{name: "fail", files: map[string]string{"q.rego": unformattedRego, "ok.rego": formattedRego}, args: []string{"--fail", "DIR"}, code: 2, want: []string{"fmt: not formatted: DIR/q.rego"}, wantNot: []string{"ok.rego", "package"}},
		{name: "fail with list", files: map[string]string{"q.rego": unformattedRego}, args: []string{"--fail", "-l", "DIR"}, code: 2, want: []string{"DIR/q.rego\n"}},
		{name: "fail on formatted files passes", files: map[string]string{"ok.rego": formattedRego}, args: []string{"--fail", "DIR"}},
		{name: "parse error", files: map[string]string{"bad.rego": "package p\n\nallow if {\n\tx ==\n}\n"}, args: []string{"DIR"}, code: 1, want: []string{"DIR/bad.rego:5:1: unexpected } token"}},
		{name: "v0 is an error by default", files: map[string]string{"old.rego": v0Rego}, args: []string{"DIR"}, code: 1, want: []string{"DIR/old.rego:3:1: `if` keyword is required before rule body"}},
		{name: "v0 compatible", files: map[string]string{"old.rego": v0Rego}, args: []string{"--v0-compatible", "--fail", "DIR"}},
		{name: "stdin", stdin: unformattedRego, want: []string{formattedRego}},
		{name: "stdin fail", stdin: unformattedRego, args: []string{"--fail", "-"}, code: 2, want: []string{"not formatted: stdin"}},
		{name: "stdin parse error", stdin: "package p\n\nallow if {\n", code: 1, want: []string{"stdin:4:0: "}},
		{name: "missing file", args: []string{"DIR/nope.rego"}, code: 1, want: []string{"no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixture.WriteTree(t, tt.files)
			args := []string{"fmt"}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "DIR", dir))
			}
			out, err := runNexus(t, tt.stdin, args...)
			code := 0
			if err != nil {
				code = cli.ExitCode(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "DIR", dir); !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
			for name, want := range tt.after {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil || string(got) != want {
					t.Errorf("%s is %q (%v), want %q", name, got, err, want)
				}
			}
		})
	}
}

func TestCheckCommand(t *testing.T) {
	good := map[string]string{
		"authz.rego": testedPolicy,
		"lib/util.rego": `package lib

is_admin(user) if user in data.admins
`,
		"data.json": `{"admins": ["ann"]}`,
	}
	tests := []struct {
		name  string
		files map[string]string
		args  []string
		code  int
		want  []string
	}{
		{name: "good policies with nexus builtins", files: good, args: []string{"DIR"}},
		{name: "type error", files: map[string]string{"p.rego": "package p\n\nallow if count(1) > 0\n"}, args: []string{"DIR"}, code: 1, want: []string{"check: 1 error:\nDIR/p.rego:3:10: count: invalid argument(s)"}},
		{name: "wrong use of a nexus builtin", files: map[string]string{"p.rego": "package p\n\nallow if nexus.roles(\"user:a\", 1)\n"}, args: []string{"DIR"}, code: 1, want: []string{"DIR/p.rego:3:10: nexus.roles: invalid argument(s)"}},
		{name: "unknown function", files: map[string]string{"p.rego": "package p\n\nallow if nexus.nope(1)\n"}, args: []string{"DIR"}, code: 1, want: []string{"DIR/p.rego:3:10: undefined function nexus.nope"}},
		{name: "parse errors in two files", files: map[string]string{"a.rego": "package a\n\nallow if {\n", "b.rego": "package b\nallow if input.x = = 1\n"}, args: []string{"DIR"}, code: 1, want: []string{"check: 2 errors:", "DIR/a.rego:4:0: ", "DIR/b.rego:2:"}},
		{name: "unused import passes", files: map[string]string{"p.rego": "package p\n\nimport data.lib\n\nallow := true\n"}, args: []string{"DIR"}},
		{name: "strict", files: map[string]string{"p.rego": "package p\n\nimport data.lib\n\nallow := true\n"}, args: []string{"--strict", "DIR"}, code: 1, want: []string{"DIR/p.rego:3:1: import data.lib unused"}},
		{name: "v0 is an error by default", files: map[string]string{"old.rego": v0Rego}, args: []string{"DIR"}, code: 1, want: []string{"DIR/old.rego:3:1: `if` keyword is required before rule body"}},
		{name: "v0 compatible", files: map[string]string{"old.rego": v0Rego}, args: []string{"--v0-compatible", "DIR"}},
		{name: "json", files: map[string]string{"p.rego": "package p\n\nallow if count(1) > 0\n"}, args: []string{"--format", "json", "DIR"}, code: 1, want: []string{`{"errors":[{"file":"DIR/p.rego","line":3,"column":10,"code":"type_error","message":"count: invalid argument(s)`}},
		{name: "json good", files: good, args: []string{"--format", "json", "DIR"}, want: []string{`{"errors":[]}`}},
		{name: "missing path", args: []string{"DIR/nope"}, code: 1, want: []string{"no such file"}},
		{name: "no path", code: 2, want: []string{"requires at least 1 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fixture.WriteTree(t, tt.files)
			args := []string{"check"}
			for _, a := range tt.args {
				args = append(args, strings.ReplaceAll(a, "DIR", dir))
			}
			out, err := runNexus(t, "", args...)
			code := 0
			if err != nil {
				code = cli.ExitCode(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "DIR", dir); !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if code == 0 && !strings.Contains(strings.Join(tt.args, " "), "json") && out != "" {
				t.Errorf("a good check printed %q", out)
			}
			if strings.Contains(strings.Join(tt.args, " "), "json") {
				line, _, _ := strings.Cut(out, "\n")
				var doc map[string]any
				if err := json.Unmarshal([]byte(line), &doc); err != nil {
					t.Errorf("json output %q: %v", line, err)
				}
			}
		})
	}
}
