package datastore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/fixture"
)

func openTemp(t testing.TB, cfg datastore.Config) *datastore.BoltStore {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "nexus.db")
	}
	s, err := datastore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) datastore.Store { return openTemp(t, datastore.Config{}) })
}

func TestCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s := openTemp(t, datastore.Config{Path: path})
	MustDrive(t, s)
	want, _ := s.Read(context.Background(), datastore.Filter{})
	rev, _ := s.Revision(context.Background())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, after, err := datastore.Compact(context.Background(), path)
	if err != nil || after <= 0 || after > before {
		t.Fatalf("Compact = %d, %d, %v", before, after, err)
	}
	s2 := openTemp(t, datastore.Config{Path: path})
	got, _ := s2.Read(context.Background(), datastore.Filter{})
	rev2, _ := s2.Revision(context.Background())
	if len(got) != len(want) || rev2 != rev {
		t.Fatalf("after compact: %d tuples rev %d, want %d rev %d", len(got), rev2, len(want), rev)
	}
	if ok, err := fixture.CheckText(context.Background(), s2, "file:report.pdf", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("check after compact: %v %v", ok, err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  datastore.Config
		ok   bool
	}{
		{"defaults", datastore.Config{Path: "x"}, true},
		{"no path", datastore.Config{}, false},
		{"negative depth", datastore.Config{Path: "x", MaxDepth: -1}, false},
		{"huge depth", datastore.Config{Path: "x", MaxDepth: 10_001}, false},
		{"negative retention", datastore.Config{Path: "x", ChangelogRetention: -1}, false},
		{"negative timeout", datastore.Config{Path: "x", OpenTimeout: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			err := cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && (cfg.MaxDepth != 50 || cfg.ChangelogRetention != 100_000 || cfg.OpenTimeout != 2*time.Second || cfg.Logger == nil) {
				t.Fatalf("defaults not filled: %+v", cfg)
			}
		})
	}
}

func TestChangelogRetention(t *testing.T) {
	s := openTemp(t, datastore.Config{ChangelogRetention: 3})
	MustDrive(t, s) // revisions 1 (schema) and 2 (import)
	ctx := context.Background()
	for i := range 5 {
		if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{{Object: api.Object{Type: "folder", ID: fmt.Sprint("r", i)}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "x"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Revision 7 now; revisions 5, 6 and 7 are kept.
	tests := []struct {
		name  string
		from  datastore.Revision
		first datastore.Revision
		err   error
	}{
		{"compacted", 2, 0, datastore.ErrRevisionCompacted},
		{"oldest kept", 4, 5, nil},
		{"latest", 6, 7, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for cs, err := range s.Watch(ctx, tt.from) {
				if tt.err != nil {
					if !errors.Is(err, tt.err) {
						t.Fatalf("Watch(%d) = %v, want %v", tt.from, err, tt.err)
					}
					return
				}
				if err != nil || cs.Revision != tt.first {
					t.Fatalf("Watch(%d) first = %d, %v, want %d", tt.from, cs.Revision, err, tt.first)
				}
				return
			}
		})
	}
}

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ro.db")
	s := openTemp(t, datastore.Config{Path: path})
	MustDrive(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro := openTemp(t, datastore.Config{Path: path, ReadOnly: true})
	if ok, err := fixture.CheckText(context.Background(), ro, "file:report.pdf", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("read-only check = %v, %v", ok, err)
	}
	if _, err := ro.Write(context.Background(), datastore.WriteRequest{Touches: []api.Tuple{{Object: api.Object{Type: "folder", ID: "x"}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "x"}}}}); err == nil {
		t.Fatal("write to a read-only store succeeded")
	}
}

func TestClosed(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := fixture.CheckText(context.Background(), s, "file:report.pdf", "read", "user:bob"); !errors.Is(err, datastore.ErrClosed) {
		t.Fatalf("check after close = %v, want ErrClosed", err)
	}
}

// TestConformanceSeekOnly runs the suite with the per-object tuple cache off,
// so every relation is read with its own seek.
func TestConformanceSeekOnly(t *testing.T) {
	defer datastore.SetMaxObjTuples(0)()
	runConformance(t, func(t *testing.T) datastore.Store { return openTemp(t, datastore.Config{}) })
}

// TestWatchImport: the change sets of a merged import list every tuple once.
func TestWatchImport(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	from, _ := s.Revision(ctx)
	var in bytes.Buffer
	for i := range 10 {
		fmt.Fprintf(&in, "folder:w%d#viewer@user:w\nfolder:w%d#viewer@user:w\n", i, i) // each twice
	}
	st, err := s.Import(ctx, &in, datastore.ImportOptions{Format: datastore.FormatText, BatchSize: 4})
	if err != nil || st.Tuples != 10 || st.Parsed != 20 {
		t.Fatalf("Import = %+v, %v", st, err)
	}
	seen := map[string]int{}
	for cs, err := range s.Watch(ctx, from) {
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs.Changes {
			if c.Op != datastore.OpTouch {
				t.Fatalf("change %v", c)
			}
			seen[c.Tuple.String()]++
		}
		if cs.Revision == st.Revision {
			break
		}
	}
	if len(seen) != 10 {
		t.Fatalf("watch saw %d tuples, want 10: %v", len(seen), seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s seen %d times", k, n)
		}
	}
}

// TestTouchThenDeleteInOneBatch: concurrent writes share bbolt
// transactions; a delete batched after a touch of the same tuple must
// still delete it (a key put earlier in the transaction has a nil value,
// which Get cannot tell from a missing key). The write with the later
// revision wins.
func TestTouchThenDeleteInOneBatch(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	ctx := context.Background()
	sc, err := schema.Parse([]byte("types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	const pairs = 200
	type result struct{ touch, del datastore.Revision }
	results := make([]result, pairs)
	var wg sync.WaitGroup
	for i := range pairs {
		tu, err := api.ParseTuple(fmt.Sprintf("doc:d%d#viewer@user:u", i))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			rev, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}})
			if err != nil {
				t.Error(err)
			}
			results[i].touch = rev
		})
		wg.Go(func() {
			rev, err := s.Write(ctx, datastore.WriteRequest{Deletes: []api.Tuple{tu}})
			if err != nil {
				t.Error(err)
			}
			results[i].del = rev
		})
	}
	wg.Wait()
	for i, r := range results {
		ts, err := s.Read(ctx, datastore.Filter{ObjectType: "doc", ObjectID: fmt.Sprintf("d%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if present, want := len(ts) == 1, r.touch > r.del; present != want {
			t.Errorf("doc:d%d: touch at revision %d, delete at %d: present = %v, want %v", i, r.touch, r.del, present, want)
		}
	}
}
