package datastore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/fixture/damage"
)

// forgeSubject writes the drive data set and folder:vault#viewer@user:u5
// into a new file, then changes u5 to u9 in the object-first index's key
// of that tuple (a byte inside a well-formed leaf page) and returns the
// file's path. The key's checksum no longer matches it, so a check that
// reads it fails with ErrCorrupt (TestCheckFindsForgedKey).
func forgeSubject(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nexus.db")
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	MustDrive(t, s)
	tu := api.Tuple{Object: api.Object{Type: "folder", ID: "vault"}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "u5"}}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The object-first key ends "vault" 0x00 relation subject-relation
	// subject-type "u5": three one-byte varints between the two IDs. A
	// stale copy of the page (bbolt copies pages on write) or the
	// changelog may hold the same bytes: the forged key is the one the
	// check for user:u9 reads.
	var at []int
	for i := 0; ; i++ {
		j := bytes.Index(b[i:], []byte("vault\x00"))
		if j < 0 {
			break
		}
		i += j
		if i+11 <= len(b) && string(b[i+9:i+11]) == "u5" {
			at = append(at, i+10)
		}
	}
	for _, i := range at {
		b[i] = '9'
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		b[i] = '5'
		s, err := datastore.Open(ctx, datastore.Config{Path: path})
		if err != nil {
			continue
		}
		ok, err := fixture.CheckText(ctx, s, "folder:vault", "read", "user:u9")
		if cerr := s.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if ok || errors.Is(err, datastore.ErrCorrupt) {
			return path
		}
	}
	t.Fatalf("no copy of the key (of %d) forges user:u9", len(at))
	return ""
}

// TestScrubFindsForgedSubject: one byte changed inside a key is found by
// the scrub before any read meets it; once the scrub found it the store is
// unhealthy, refuses writes and answers no check.
func TestScrubFindsForgedSubject(t *testing.T) {
	ctx := context.Background()
	path := forgeSubject(t)
	s := openTemp(t, datastore.Config{Path: path})
	if err := s.Health(); err != nil {
		t.Fatalf("Health before the scrub = %v", err)
	}
	rep, err := s.Scrub(ctx, 0)
	var ce *datastore.CorruptError
	if !errors.As(err, &ce) || ce.Op != "scrub" {
		t.Fatalf("Scrub = %+v, %v; want a *CorruptError found by scrub", rep, err)
	}
	t.Logf("scrub: %v", err)
	if err := s.Health(); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("Health = %v, want ErrCorrupt", err)
	}
	for _, sub := range []string{"user:u9", "user:u5", "user:alice"} {
		if ok, err := fixture.CheckText(ctx, s, "folder:vault", "read", sub); ok || !errors.Is(err, datastore.ErrCorrupt) {
			t.Errorf("check for %s after the scrub = %v, %v; want ErrCorrupt", sub, ok, err)
		}
	}
	tu := api.Tuple{Object: api.Object{Type: "folder", ID: "x"}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "bob"}}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}}); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("write after the scrub = %v, want ErrCorrupt", err)
	}
}

// TestScrubSound: a sound store, written to while the scrub runs, passes
// with every key read.
func TestScrubSound(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			tu := api.Tuple{Object: api.Object{Type: "folder", ID: "w" + string(rune('a'+i%26))}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "bob"}}
			if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 5 {
		rep, err := s.Scrub(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Entries == 0 {
			t.Fatalf("Scrub read no keys: %+v", rep)
		}
	}
	<-done
	if err := s.Health(); err != nil {
		t.Fatal(err)
	}
}

// answers is what reads of both indexes return: every tuple in
// object-first order, then each subject's tuples (subject-first reads).
func answers(ctx context.Context, s *datastore.BoltStore, subjects []api.Subject) (string, error) {
	var b strings.Builder
	if _, err := s.Export(ctx, &b, datastore.FormatText); err != nil {
		return "", err
	}
	for _, sub := range subjects {
		ts, err := s.Read(ctx, datastore.Filter{SubjectType: sub.Type, SubjectID: sub.ID})
		if err != nil {
			return "", err
		}
		for _, tu := range ts {
			b.WriteString(tu.String())
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

// TestScrubRandomFlips flips random bits in the pages of both indexes of
// a real data file and counts, of the flips that change what reads
// answer (or make them fail), how many the scrub finds. Every one must be
// found; the counts are logged (go test -run TestScrubRandomFlips -v).
func TestScrubRandomFlips(t *testing.T) {
	ctx := context.Background()
	base := damage.Base(t)
	s, err := datastore.Open(ctx, datastore.Config{Path: base, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Read(ctx, datastore.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[api.Subject]bool{}
	var subjects []api.Subject
	for _, tu := range all {
		sub := api.Subject{Type: tu.Subject.Type, ID: tu.Subject.ID}
		if !seen[sub] {
			seen[sub] = true
			subjects = append(subjects, sub)
		}
	}
	want, err := answers(ctx, s, subjects)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	n := 120
	if testing.Short() {
		n = 30
	}
	counts := map[string]int{}
	for _, f := range damage.Flips(t, base, n, 5) {
		if !strings.HasPrefix(f.Name, "random/") || (f.Page.Bucket != "obj" && f.Page.Bucket != "subj") {
			continue
		}
		counts["flips"]++
		path := f.Apply(t, base)
		s, err := datastore.Open(ctx, datastore.Config{Path: path})
		if err != nil {
			counts["open finds it"]++
			continue
		}
		got, rerr := answers(ctx, s, subjects)
		affects := rerr != nil || got != want
		_, serr := s.Scrub(ctx, 0)
		found := errors.Is(serr, datastore.ErrCorrupt)
		if serr != nil && !found {
			t.Errorf("%s: Scrub = %v", f.Name, serr)
		}
		switch {
		case affects && found:
			counts["affects reads, scrub finds it"]++
		case affects:
			counts["affects reads, scrub MISSES it"]++
			t.Errorf("%s changes what reads answer (read error: %v) but the scrub finds nothing", f.Name, rerr)
		case found:
			counts["no read changes, scrub finds it"]++
		default:
			counts["no effect seen"]++
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("random bit flips in the index pages: %v", counts)
}
