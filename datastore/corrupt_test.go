package datastore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/fixture/damage"
)

// TestCorruptFile flips bytes in a copy of a real data file, in every kind
// of page (both meta pages, the free list, the root bucket, and root,
// branch and leaf pages of each bucket) and at random offsets, and holds
// each case to this: Open fails with ErrCorrupt, or every method answers
// or fails with ErrCorrupt (never a panic, a hang or another error), a
// store that met ErrCorrupt reports it in Health and refuses writes, and
// Verify finds whatever a method found. A damaged header of a page Open
// reads must fail Open.
func TestCorruptFile(t *testing.T) {
	base := damage.Base(t)
	random := 150
	if testing.Short() {
		random = 20
	}
	var mu sync.Mutex
	counts := map[string]int{}
	t.Cleanup(func() { t.Logf("outcomes: %v", counts) })
	for _, f := range damage.Flips(t, base, random, 12) {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel() // mostly waiting for fsync
			path := f.Apply(t, base)
			done := make(chan string, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						done <- fmt.Sprintf("FAIL: panic: %v", r)
					}
				}()
				done <- corruptCase(t, path)
			}()
			select {
			case outcome := <-done:
				if rest, failed := strings.CutPrefix(outcome, "FAIL: "); failed {
					t.Fatalf("%s (the damaged file: %s)", rest, keep(f.Apply(t, base)))
				}
				if f.Read && f.Header() && outcome != "open fails" {
					t.Errorf("Open read the damaged page but: %s", outcome)
				}
				t.Log(outcome)
				mu.Lock()
				counts[outcome]++
				mu.Unlock()
			case <-time.After(time.Minute):
				t.Fatal("hangs")
			}
		})
	}
}

// keep copies a damaged file out of the test's temporary directory, to
// reproduce a failure: bbolt's free list allocates pages in map order, so
// each run lays out the base file, and places the random flips, anew.
func keep(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	f, err := os.CreateTemp("", "nexus-corrupt-*.db")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return err.Error()
	}
	return f.Name()
}

// corruptCase opens the damaged file at path and uses every method;
// it returns the outcome, or "FAIL: " and what went wrong.
func corruptCase(t *testing.T, path string) string {
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		if !errors.Is(err, datastore.ErrCorrupt) {
			return fmt.Sprintf("FAIL: Open: %v, want ErrCorrupt", err)
		}
		if !strings.Contains(err.Error(), path) {
			return fmt.Sprintf("FAIL: Open's error does not name the file: %v", err)
		}
		// Nothing holds the file: Verify can open it and finds the damage.
		if _, verr := datastore.Verify(ctx, path); !errors.Is(verr, datastore.ErrCorrupt) {
			return fmt.Sprintf("FAIL: Open: %v; Verify: %v", err, verr)
		}
		return "open fails"
	}
	var first error
	use := func(op string, err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("%s: %w", op, err)
		}
	}
	for _, c := range DriveCases {
		_, err := fixture.CheckText(ctx, s, c.Object, c.Permission, c.Subject)
		use("check", err)
	}
	bob := api.Subject{Type: "user", ID: "bob"}
	_, err = s.AppendRoles(ctx, nil, api.Subject{Type: "user", ID: "alice"}, "acme")
	use("roles", err)
	for _, o := range []string{"f0100", "f0001", "f0199"} {
		use("preload", s.View(ctx, func(v *datastore.View) error {
			return v.Preload(api.Object{Type: "file", ID: o}, api.Subject{Type: "user", ID: "u" + o[2:]})
		}))
	}
	_, err = s.Read(ctx, datastore.Filter{})
	use("read", err)
	_, err = s.Read(ctx, datastore.Filter{SubjectType: "user", SubjectID: "u100"})
	use("read", err)
	_, err = s.Export(ctx, io.Discard, datastore.FormatText)
	use("export", err)
	_, err = s.LookupResources(ctx, api.Subject{Type: "user", ID: "u100"}, "read", "file")
	use("lookup", err)
	_, err = s.LookupSubjects(ctx, api.Object{Type: "file", ID: "f0100"}, "read", "user")
	use("lookup", err)
	rev, _ := s.Revision(ctx)
	for cs, err := range s.Watch(ctx, 0) {
		use("watch", err)
		if err != nil || cs.Revision >= rev {
			break
		}
	}
	_, err = s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{{Object: api.Object{Type: "folder", ID: "new"}, Relation: "viewer", Subject: bob}}})
	use("write", err)
	_, err = s.Write(ctx, datastore.WriteRequest{Deletes: []api.Tuple{{Object: api.Object{Type: "file", ID: "f0100"}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "u100"}}}})
	use("write", err)
	_, err = s.Import(ctx, strings.NewReader("folder:imp#viewer@user:bob\n"), datastore.ImportOptions{Format: datastore.FormatText})
	use("import", err)
	health := s.Health()
	if err := s.Close(); err != nil {
		return fmt.Sprintf("FAIL: Close: %v", err)
	}
	_, verr := datastore.Verify(ctx, path)
	if verr != nil && !errors.Is(verr, datastore.ErrCorrupt) {
		return fmt.Sprintf("FAIL: Verify: %v", verr)
	}
	switch {
	case first == nil:
		if health != nil {
			return fmt.Sprintf("FAIL: no method failed, Health = %v", health)
		}
		if verr != nil {
			return "verify finds it"
		}
		return "no effect seen"
	case !errors.Is(first, datastore.ErrCorrupt):
		return fmt.Sprintf("FAIL: %v, want ErrCorrupt", first)
	case !errors.Is(health, datastore.ErrCorrupt):
		return fmt.Sprintf("FAIL: %v, but Health = %v", first, health)
	case verr == nil:
		return fmt.Sprintf("FAIL: %v, but Verify finds nothing", first)
	}
	return "requests fail"
}

// TestCorruptStoreRefusesWrites: once a method met a damaged page, the
// store reports it and refuses every write, even one that would not touch
// the damage; reads that avoid the damage still answer.
func TestCorruptStoreRefusesWrites(t *testing.T) {
	base := damage.Base(t)
	ctx := context.Background()
	var s *datastore.BoltStore
	for _, f := range damage.Flips(t, base, 0, 0) {
		// A leaf of the changelog, which only Watch reads (Open reads the
		// first leaf's header).
		if f.Page.Bucket == "log" && f.Page.Kind == "leaf" && !f.Page.Root && strings.HasSuffix(f.Name, "/flags") {
			var err error
			if s, err = datastore.Open(ctx, datastore.Config{Path: f.Apply(t, base)}); err == nil {
				t.Cleanup(func() { _ = s.Close() })
				break
			}
		}
	}
	if s == nil {
		t.Fatal("no changelog leaf that Open does not read in the base file")
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health before the damage is met = %v", err)
	}
	if ok, err := fixture.CheckText(ctx, s, "file:report.pdf", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("check = %v, %v", ok, err)
	}
	var werr error
	for _, err := range s.Watch(ctx, 0) {
		werr = err
		break
	}
	var ce *datastore.CorruptError
	if !errors.As(werr, &ce) || ce.Op != "watch" || ce.Path == "" {
		t.Fatalf("Watch = %v, want a *CorruptError found by watch", werr)
	}
	if err := s.Health(); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("Health = %v", err)
	}
	tu := api.Tuple{Object: api.Object{Type: "folder", ID: "x"}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "bob"}}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}}); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("write after the damage = %v, want ErrCorrupt", err)
	}
	if ok, err := fixture.CheckText(ctx, s, "file:report.pdf", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("check = %v, %v", ok, err)
	}
}

// TestExportWriterPanicIsTheCallers: a panic of the writer given to Export
// reaches the caller as it is, and says nothing about the file.
func TestExportWriterPanicIsTheCallers(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	func() {
		defer func() {
			if r := recover(); r != "writer broke" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _ = s.Export(context.Background(), panicWriter{}, datastore.FormatText)
	}()
	if err := s.Health(); err != nil {
		t.Fatalf("Health = %v", err)
	}
}

type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("writer broke") }

// TestVerifySound: Verify finds nothing wrong in a sound file, and counts
// what it holds.
func TestVerifySound(t *testing.T) {
	base := damage.Base(t)
	rep, err := datastore.Verify(context.Background(), base)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("Verify = %v, %v", err, rep.Problems)
	}
	if rep.Tuples < 6000 || rep.Revision == 0 || rep.Pages == 0 || rep.PageSize == 0 {
		t.Fatalf("report %+v", rep)
	}
	if _, err := datastore.Verify(context.Background(), filepath.Join(t.TempDir(), "missing.db")); err == nil || errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("Verify of a missing file = %v", err)
	}
}

// TestOpenNotBolt: a file that is not a bbolt file is named as damaged.
func TestOpenNotBolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relations.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := datastore.Open(context.Background(), datastore.Config{Path: path})
	if !errors.Is(err, datastore.ErrCorrupt) || !strings.Contains(err.Error(), "meta pages") {
		t.Fatalf("Open = %v", err)
	}
}
