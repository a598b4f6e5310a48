package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/internal/cli"
)

func TestRelSchemaConvert(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string // substring of the output
		code  int    // exit status
	}{
		{"openfga by extension", "", []string{"rel", "schema", "convert", "../../examples/drive/drive.fga"}, "write: owner + editor + parent->write", 0},
		{"spicedb by extension", "", []string{"rel", "schema", "convert", "../../examples/drive/drive.zed"}, "read: write + viewer + parent->read", 0},
		{"stdin with --from", "model\n  schema 1.1\ntype user\ntype doc\n  relations\n    define v: [user] or o\n    define o: [user]\n",
			[]string{"rel", "schema", "convert", "--from", "openfga", "-"}, "v_direct: [user]  # tuples of OpenFGA's v", 0},
		{"stdin detected", "definition user {}\n", []string{"rel", "schema", "convert", "-"}, "user: {}", 0},
		{"error with line:col", "definition user {}\ndefinition doc {\n  relation v: user with c\n}\n",
			[]string{"rel", "schema", "convert", "-"}, "stdin:3:20: nexus does not support SpiceDB caveats", 1},
		{"no file", "", []string{"rel", "schema", "convert"}, "accepts 1 arg(s)", 2},
		{"bad --from", "", []string{"rel", "schema", "convert", "--from", "cedar", "x.cedar"}, "unknown format", 2},
		{"unknown flag", "", []string{"rel", "schema", "convert", "--form", "openfga", "x"}, "unknown flag: --form", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runNexus(t, tt.stdin, tt.args...)
			code := 0
			if err != nil {
				code = cli.ExitCode(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tt.code, err, out)
			}
			if !strings.Contains(out, tt.want) {
				t.Fatalf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
}

func TestRelFromOpenFGA(t *testing.T) {
	dir := t.TempDir()
	dd := "--data-dir=" + dir
	model := filepath.Join(dir, "model.fga")
	if err := os.WriteFile(model, []byte(`model
  schema 1.1
type user
type folder
  relations
    define parent: [folder]
    define owner: [user]
    define viewer: [user] or owner or viewer from parent
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tuples := filepath.Join(dir, "tuples.json")
	if err := os.WriteFile(tuples, []byte(`[
  {"user": "user:anne", "relation": "viewer", "object": "folder:root"},
  {"user": "folder:root", "relation": "parent", "object": "folder:docs"}
]`), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"user":"user:bob","relation":"owner","object":"folder:x"}`+"\n"+`{"user":"user:*","relation":"viewer","object":"folder:x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := filepath.Join(dir, "refused.csv")
	if err := os.WriteFile(refused, []byte("user_type,user_id,relation,object_type,object_id\nuser,bob,owner,folder,x\nuser,bob,editor,folder,x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name  string
		stdin string
		args  []string
		want  string
		fails bool
	}{
		{"import before schema", "", []string{"rel", "import", "--from", "openfga", tuples, dd}, "write the schema first", true},
		{"schema write .fga", "", []string{"rel", "schema", "write", model, dd}, "folder#viewer: tuples go to viewer_direct, checks use folder#viewer", false},
		{"schema read shows the split", "", []string{"rel", "schema", "read", dd}, "viewer_direct: [user]  # tuples of OpenFGA's viewer", false},
		{"import", "", []string{"rel", "import", "--from", "openfga", tuples, dd}, "imported 2 OpenFGA tuples (1 to the relations that store split ones)", false},
		{"stored under viewer_direct", "", []string{"rel", "read", "--subject", "user:anne", dd}, "folder:root#viewer_direct@user:anne", false},
		{"check keeps the name", "", []string{"rel", "check", "folder:docs", "viewer", "user:anne", dd}, "allowed", false},
		{"wildcard names its line", "", []string{"rel", "import", "--from", "openfga", bad, dd}, "bad.jsonl:2:1: nexus does not support wildcard subjects", true},
		{"schema refusal names its line", "", []string{"rel", "import", "--from", "openfga", refused, dd}, "refused.csv: line 3: ", true},
		{"nothing of a failed import", "", []string{"rel", "read", "--subject", "user:bob", dd}, "", false},
		{"stdin jsonl", `{"user":"user:carl","relation":"owner","object":"folder:docs"}` + "\n", []string{"rel", "import", "--from", "openfga", "-", dd}, "imported 1 OpenFGA tuples", false},
		{"spicedb relationships", "folder:docs#owner@user:dora\n", []string{"rel", "import", "--from", "spicedb", "-", dd}, "imported 1 tuples", false},
		{"check", "", []string{"rel", "check", "folder:docs", "viewer", "user:dora", dd}, "allowed", false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			out, err := runNexus(t, s.stdin, s.args...)
			if (err != nil) != s.fails {
				t.Fatalf("err = %v, want failure %v; output:\n%s", err, s.fails, out)
			}
			if !strings.Contains(out, s.want) {
				t.Fatalf("output lacks %q:\n%s", s.want, out)
			}
			if s.name == "nothing of a failed import" && strings.TrimSpace(out) != "" {
				t.Fatalf("a failed import wrote %q", out)
			}
		})
	}
}

func TestRelTest(t *testing.T) {
	dir := t.TempDir()
	failing := filepath.Join(dir, "failing.yaml")
	if err := os.WriteFile(failing, []byte(`schema: |
  definition user {}
  definition doc {
    relation viewer: user
  }
relationships: |
  doc:1#viewer@user:anne
assertions:
  assertTrue:
    - doc:1#viewer@user:anne
    - doc:1#viewer@user:bob
`), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("schema: |\n  definition user {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string
		code int
	}{
		{"examples pass", []string{"rel", "test", "../../examples/drive/drive.test.yaml", "../../examples/drive/drive.fga.yaml", "../../examples/drive/drive.zed.yaml"},
			[]string{"ok   ../../examples/drive/drive.test.yaml: 9 assertions", "ok   ../../examples/drive/drive.zed.yaml: 5 assertions"}, 0},
		{"a failing assertion", []string{"rel", "test", failing},
			[]string{"FAIL " + failing + ":11: check doc:1 viewer user:bob: want true, got false", "1 of 2 assertions failed"}, 1},
		{"a file that cannot run", []string{"rel", "test", broken, failing},
			[]string{broken + ":3:3: want `relation`", "ERROR " + broken, "1 of 2 test files could not run"}, 2},
		{"no file", []string{"rel", "test"}, []string{"requires at least 1 arg"}, 2},
		{"unknown flag", []string{"rel", "test", "--verbose", failing}, []string{"unknown flag"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runNexus(t, "", tt.args...)
			code := 0
			if err != nil {
				code = cli.ExitCode(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tt.code, err, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
