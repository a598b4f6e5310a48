package api

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTuple(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Tuple
		ok   bool
	}{
		{"direct", "folder:d1#viewer@user:alice", Tuple{Object{"folder", "d1"}, "viewer", Subject{"user", "alice", ""}}, true},
		{"userset", "folder:d1#editor@group:eng#member", Tuple{Object{"folder", "d1"}, "editor", Subject{"group", "eng", "member"}}, true},
		{"id chars", "file:a-b_c.d=e+f/g|h~i#parent@folder:X9", Tuple{Object{"file", "a-b_c.d=e+f/g|h~i"}, "parent", Subject{"folder", "X9", ""}}, true},
		{"empty", "", Tuple{}, false},
		{"no at", "folder:d1#viewer", Tuple{}, false},
		{"no relation", "folder:d1@user:a", Tuple{}, false},
		{"empty relation", "folder:d1#@user:a", Tuple{}, false},
		{"empty id", "folder:#viewer@user:a", Tuple{}, false},
		{"empty subject id", "folder:d1#viewer@user:", Tuple{}, false},
		{"empty subject rel", "folder:d1#viewer@group:g#", Tuple{}, false},
		{"upper type", "Folder:d1#viewer@user:a", Tuple{}, false},
		{"colon in id", "folder:d:1#viewer@user:a", Tuple{}, false},
		{"two at", "folder:d1#viewer@user:a@b", Tuple{}, false},
		{"space", "folder:d1#viewer@user:a b", Tuple{}, false},
		{"long id", "folder:" + strings.Repeat("a", MaxIDLen+1) + "#viewer@user:a", Tuple{}, false},
		{"max id", "folder:" + strings.Repeat("a", MaxIDLen) + "#viewer@user:a", Tuple{Object{"folder", strings.Repeat("a", MaxIDLen)}, "viewer", Subject{"user", "a", ""}}, true},
		{"long name", strings.Repeat("a", MaxNameLen+1) + ":x#r@u:x", Tuple{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTuple(tt.in)
			if tt.ok != (err == nil) {
				t.Fatalf("ParseTuple(%q) err = %v, want ok=%v", tt.in, err, tt.ok)
			}
			if !tt.ok {
				if !errors.Is(err, ErrSyntax) {
					t.Fatalf("error %v is not ErrSyntax", err)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("ParseTuple(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Fatalf("String() = %q, want %q", s, tt.in)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

func TestParseObjectSubject(t *testing.T) {
	if o, err := ParseObject("tenant:acme"); err != nil || o != (Object{"tenant", "acme"}) || o.String() != "tenant:acme" {
		t.Fatalf("ParseObject = %v, %v", o, err)
	}
	if _, err := ParseObject("tenant:acme#x"); err == nil {
		t.Fatal("ParseObject accepted a relation")
	}
	s, err := ParseSubject("group:eng#member")
	if err != nil || s != (Subject{"group", "eng", "member"}) || s.String() != "group:eng#member" || s.Object() != (Object{"group", "eng"}) {
		t.Fatalf("ParseSubject = %v, %v", s, err)
	}
	if _, err := ParseSubject("user"); err == nil {
		t.Fatal("ParseSubject accepted user")
	}
}

func TestParseTupleNoAlloc(t *testing.T) {
	in := "folder:d1#editor@group:eng#member"
	n := testing.AllocsPerRun(100, func() {
		if _, err := ParseTuple(in); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Fatalf("ParseTuple allocates %v times", n)
	}
}

func FuzzParseTuple(f *testing.F) {
	for _, s := range []string{"folder:d1#viewer@user:alice", "folder:d1#editor@group:eng#member", "a:b#c@d:e#f", "x:#@:", "@#:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tu, err := ParseTuple(s)
		if err != nil {
			return
		}
		if err := tu.Validate(); err != nil {
			t.Fatalf("parsed tuple %q does not validate: %v", s, err)
		}
		if tu.String() != s {
			t.Fatalf("round trip %q -> %q", s, tu.String())
		}
		again, err := ParseTuple(tu.String())
		if err != nil || again != tu {
			t.Fatalf("reparse %q: %v %v", s, again, err)
		}
	})
}

func BenchmarkParseTuple(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseTuple("folder:d1#editor@group:eng#member"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSplitWithoutValidating(t *testing.T) {
	if o, err := SplitObject("doc:has space"); err != nil || o != (Object{Type: "doc", ID: "has space"}) {
		t.Fatalf("SplitObject = %v, %v", o, err)
	}
	if s, err := SplitSubject("group:eng#member"); err != nil || s != (Subject{Type: "group", ID: "eng", Relation: "member"}) {
		t.Fatalf("SplitSubject = %v, %v", s, err)
	}
	for _, bad := range []string{"nocolon", "group:eng#", ""} {
		if _, err := SplitSubject(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("SplitSubject(%q) = %v, want a syntax error", bad, err)
		}
	}
}
