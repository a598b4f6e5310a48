package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runNexus(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String() + errOut.String(), err
}

func TestRelCommands(t *testing.T) {
	dir := t.TempDir()
	dd := "--data-dir=" + dir
	steps := []struct {
		name  string
		stdin string
		args  []string
		want  string // substring of the output
		fails bool
	}{
		{"schema", "", []string{"rel", "schema", "write", "../../defaults/drive/schema.yaml", dd}, "revision 1", false},
		{"bad schema", "types: [", []string{"rel", "schema", "write", "-", dd}, "yaml", true},
		{"import", "", []string{"rel", "import", "../../defaults/drive/tuples.txt", dd}, "imported 18 tuples", false},
		{"check allowed", "", []string{"rel", "check", "file:report.pdf", "read", "user:bob", dd}, "allowed", false},
		{"check denied", "", []string{"rel", "check", "file:report.pdf", "read", "user:carol", dd}, "denied", false},
		{"check trace", "", []string{"rel", "check", "--trace", "file:report.pdf", "write", "user:frank", dd}, "group:ops#member", false},
		{"check unknown", "", []string{"rel", "check", "file:x", "print", "user:bob", dd}, "", true},
		{"roles", "", []string{"rel", "roles", "user:alice", "acme", dd}, "admin", false},
		{"write", "", []string{"rel", "write", "folder:x#viewer@user:zed", dd}, "revision 3", false},
		{"write stdin", "folder:y#viewer@user:zed\n# comment\n", []string{"rel", "write", "-", dd}, "revision 4", false},
		{"read", "", []string{"rel", "read", "--subject", "user:zed", dd}, "folder:y#viewer@user:zed", false},
		{"delete", "", []string{"rel", "delete", "folder:x#viewer@user:zed", dd}, "revision 5", false},
		{"invalid write", "", []string{"rel", "write", "folder:x#reader@user:zed", dd}, "", true},
		{"bad import line", "{\"object\":\"folder:a\",\"relation\":\"viewer\",\"subject\":\"user:a\"}\nnope\n", []string{"rel", "import", "-", dd}, "", true},
		{"export csv", "", []string{"rel", "export", "--format", "csv", dd}, "object,relation,subject\nfile:notes.txt,parent,folder:root", false},
		{"schema read", "", []string{"rel", "schema", "read", dd}, "roles:", false},
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
		})
	}
	// The failed import named its line and wrote nothing.
	_, err := runNexus(t, "{\"object\":\"folder:a\",\"relation\":\"viewer\",\"subject\":\"user:a\"}\nnope\n", "rel", "import", "-", dd)
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("import error = %v", err)
	}
	if out, _ := runNexus(t, "", "rel", "read", "--object", "folder:a", dd); strings.TrimSpace(out) != "" {
		t.Fatalf("failed import wrote %q", out)
	}
	// Export to a file and import it into a fresh directory, compacting.
	exp := filepath.Join(dir, "all.ndjson")
	if _, err := runNexus(t, "", "rel", "export", exp, dd); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if _, err := runNexus(t, "", "rel", "schema", "write", "../../defaults/drive/schema.yaml", "--data-dir="+dir2); err != nil {
		t.Fatal(err)
	}
	out, err := runNexus(t, "", "rel", "import", "--compact", "--progress-interval=1ms", exp, "--data-dir="+dir2)
	if err != nil || !strings.Contains(out, "imported 19 tuples") || !strings.Contains(out, "compacted") {
		t.Fatalf("import = %v:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir2, relDataFile)); err != nil {
		t.Fatal(err)
	}
}
