package datastore_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// TestAppendSubjects: AppendSubjects names exactly the subjects Read
// returns for the same object and relation, for every object and relation
// of the demo data, for objects that do not exist, and for an ID that is
// a prefix of a stored one; what it cannot read is an error.
func TestAppendSubjects(t *testing.T) {
	ctx := context.Background()
	s := fixture.DemoStore(t)
	// Userset subjects and an ID that extends another's.
	var touches []api.Tuple
	for _, txt := range []string{"folder:q3#viewer@group:eng#member", "file:report.pdf.bak#tenant@tenant:globex"} {
		tu, err := api.ParseTuple(txt)
		if err != nil {
			t.Fatal(err)
		}
		touches = append(touches, tu)
	}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: touches}); err != nil {
		t.Fatal(err)
	}
	all, err := s.Read(ctx, datastore.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		obj api.Object
		rel string
	}
	seen := map[key]bool{
		{api.Object{Type: "file", ID: "nothing-here"}, "tenant"}:  true,
		{api.Object{Type: "file", ID: "report"}, "tenant"}:        true, // a prefix of report.pdf
		{api.Object{Type: "file", ID: "report.pdf"}, "no_such"}:   true,
		{api.Object{Type: "no_such", ID: "report.pdf"}, "tenant"}: true,
	}
	for _, tu := range all {
		seen[key{tu.Object, tu.Relation}] = true
	}
	var dst []string
	for k := range seen {
		ts, err := s.Read(ctx, datastore.Filter{ObjectType: k.obj.Type, ObjectID: k.obj.ID, Relation: k.rel})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, tu := range ts {
			want = append(want, tu.Subject.String())
		}
		dst, err = s.AppendSubjects(ctx, dst[:0], k.obj, k.rel)
		if err != nil {
			t.Fatalf("AppendSubjects(%v, %s): %v", k.obj, k.rel, err)
		}
		if !slices.Equal(dst, want) && len(dst)+len(want) > 0 {
			t.Errorf("AppendSubjects(%v, %s) = %q, Read names %q", k.obj, k.rel, dst, want)
		}
	}
	got, err := s.AppendSubjects(ctx, []string{"kept"}, api.Object{Type: "folder", ID: "q3"}, "viewer")
	if err != nil || len(got) < 2 || got[0] != "kept" || !slices.Contains(got, "group:eng#member") {
		t.Fatalf("AppendSubjects appending to a slice = %q, %v", got, err)
	}
	for _, bad := range []api.Object{{Type: "file", ID: ""}, {Type: "", ID: "x"}, {Type: "file", ID: "a\x00b"}, {Type: "file", ID: "a b"}} {
		if _, err := s.AppendSubjects(ctx, nil, bad, "tenant"); !errors.Is(err, api.ErrSyntax) {
			t.Errorf("AppendSubjects(%q) = %v, want a syntax error", bad, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.AppendSubjects(cctx, nil, api.Object{Type: "file", ID: "report.pdf"}, "tenant"); err == nil {
		t.Fatal("AppendSubjects with a canceled context succeeded")
	}
}

// BenchmarkAppendSubjects reads a resource's stored tenant as the default
// policy does on every uncached check (nexus.relations), against Read.
func BenchmarkAppendSubjects(b *testing.B) {
	ctx := context.Background()
	s := fixture.DemoStore(b)
	obj := api.Object{Type: "file", ID: "report.pdf"}
	b.Run("AppendSubjects", func(b *testing.B) {
		var dst []string
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if dst, err = s.AppendSubjects(ctx, dst[:0], obj, "tenant"); err != nil || len(dst) != 1 {
				b.Fatal(dst, err)
			}
		}
	})
	b.Run("Read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ts, err := s.Read(ctx, datastore.Filter{ObjectType: obj.Type, ObjectID: obj.ID, Relation: "tenant"})
			if err != nil || len(ts) != 1 {
				b.Fatal(ts, err)
			}
			_ = ts[0].Subject.String()
		}
	})
}
