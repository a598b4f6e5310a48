package modeltest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/modeltest"
)

const drive = "../examples/drive/"

func run(t *testing.T, file string) *modeltest.Report {
	t.Helper()
	s, err := modeltest.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// writeFile writes a test file into a temporary directory.
func writeFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExamples(t *testing.T) {
	abs, err := filepath.Abs(drive)
	if err != nil {
		t.Fatal(err)
	}
	native, err := os.ReadFile(drive + "drive.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		file       string
		assertions int
	}{
		{"nexus", drive + "drive.test.yaml", 9},
		{"openfga store file", drive + "drive.fga.yaml", 8},
		{"spicedb validation file", drive + "drive.zed.yaml", 5},
	}
	// The nexus test file against the two other forms of the model.
	for _, model := range []string{"drive.fga", "drive.zed"} {
		src := strings.Replace(string(native), "schema_file: ../../defaults/drive/schema.yaml", "schema_file: "+filepath.Join(abs, model), 1)
		src = strings.Replace(src, "tuple_file: ../../defaults/drive/tuples.txt", "tuple_file: "+filepath.Join(abs, "../../defaults/drive/tuples.txt"), 1)
		if src == string(native) {
			t.Fatal("the nexus test file no longer names the drive's schema and tuples where this test expects them")
		}
		tests = append(tests, struct {
			name       string
			file       string
			assertions int
		}{"nexus tests on " + model, writeFile(t, "t.yaml", src), 9})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := run(t, tt.file)
			if len(rep.Failures) > 0 || rep.Assertions != tt.assertions {
				t.Fatalf("%d assertions, failures: %v", rep.Assertions, rep.Failures)
			}
		})
	}
}

func TestFailures(t *testing.T) {
	f := writeFile(t, "t.yaml", `model: |
  model
    schema 1.1
  type user
  type doc
    relations
      define owner: [user]
      define viewer: [user] or owner
tuples:
  - {user: "user:anne", relation: viewer, object: "doc:1"}
  - doc:1#owner@user:bob
check:
  - {object: doc:1, relation: viewer, user: user:anne, expected: true}
  - {object: doc:1, relation: viewer, user: user:bob, expected: false}
  - {object: doc:1, permission: nope, subject: user:bob, expected: false}
tests:
  - name: own tuples
    tuples:
      - {user: "user:carl", relation: viewer, object: "doc:1"}
    check:
      - user: user:carl
        object: doc:1
        assertions:
          viewer: false
          owner: false
  - name: after
    check:
      - user: user:carl
        object: doc:1
        assertions:
          viewer: false
`)
	rep := run(t, f)
	var got []string
	for _, fl := range rep.Failures {
		s := fl.String()
		if i := strings.Index(s, "got error: "); i >= 0 {
			s = s[:i+len("got error")] // the store's wording is its own
		}
		got = append(got, s)
	}
	want := []string{
		f + ":14: check doc:1 viewer user:bob: want false, got true",
		f + ":15: check doc:1 nope user:bob: want false, got error",
		f + ":24: (own tuples) check doc:1 viewer user:carl: want false, got true",
	}
	if rep.Assertions != 6 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%d assertions, failures:\n%s\nwant:\n%s", rep.Assertions, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // substring; file names are shown as FILE
	}{
		{"not yaml", "check: [", "FILE: yaml:"},
		{"unknown key", "schema: 'types: {user: {}}'\nchecks: []\n", "FILE:2:1: unknown key \"checks\""},
		{"no schema", "check: []\n", "FILE: no schema"},
		{"two schemas", "schema: x\nmodel_file: y\n", "several schemas given (schema, model_file)"},
		{"no assertions", "schema: 'types: {user: {}}'\n", "FILE:1:1: no assertions"},
		{"missing schema file", "schema_file: nope.zed\ncheck: []\n", "FILE:1:14: open"},
		{"schema error in a block", "schema: |\n  definition user {}\n  definition doc {\n    relation v: user:*\n  }\ncheck: []\n", "FILE:4:17: nexus does not support wildcard subjects"},
		{"schema error in a flow scalar", "schema: \"definition user {} definition doc { relation v: nope }\"\ncheck: []\n", "FILE:1:58: doc#v: unknown type \"nope\""},
		{"bad tuple", "schema: 'types: {user: {}}'\ntuples:\n  - nope\n", "FILE:3:5: api: want tuple"},
		{"tuple the schema refuses", "schema: 'types: {user: {}, doc: {relations: {v: [user]}}}'\ntuples:\n  - doc:1#w@user:a\ncheck:\n  - {object: doc:1, permission: v, subject: user:a, expected: true}\n", "FILE:3:1: datastore: invalid tuple"},
		{"caveated relationship", "schema: 'types: {user: {}}'\nrelationships: |\n  doc:1#v@user:a[c]\n", "FILE:3:1: doc:1#v@user:a[c]: caveated"},
		{"assertCaveated", "schema: 'types: {user: {}}'\nassertions:\n  assertCaveated: []\n", "FILE:3:3: nexus does not support SpiceDB caveats"},
		{"check without expected", "schema: 'types: {user: {}}'\ncheck:\n  - {object: doc:1, permission: v, subject: user:a}\n", "FILE:3:5: a check needs object, permission, subject and expected"},
		{"check with context", "schema: 'types: {user: {}}'\ncheck:\n  - {user: user:a, object: doc:1, context: {}, assertions: {v: true}}\n", "OpenFGA conditions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := writeFile(t, "t.yaml", tt.src)
			s, err := modeltest.Load(f)
			if err == nil {
				_, err = s.Run(context.Background())
			}
			if err == nil {
				t.Fatal("no error")
			}
			want := strings.ReplaceAll(tt.want, "FILE", f)
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q lacks %q", err, want)
			}
		})
	}
}
