package datastore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/fixture"
)

const replicaSchema = `
types:
  user: {}
  folder:
    relations:
      viewer: [user]
      editor: [user]
    permissions:
      read: viewer + editor
`

func mustParseSchema(t *testing.T, src string) *schema.Schema {
	t.Helper()
	sc, err := schema.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// watchThrough returns the change sets after revision from, through
// revision to.
func watchThrough(t *testing.T, s *datastore.BoltStore, from, to datastore.Revision) []datastore.ChangeSet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out []datastore.ChangeSet
	for cs, err := range s.Watch(ctx, from) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cs)
		if cs.Revision == to {
			break
		}
	}
	return out
}

func export(t *testing.T, s *datastore.BoltStore) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := s.Export(context.Background(), &b, datastore.FormatText); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestApplyAt(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	if err := s.ApplyAt(ctx, 3, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	if rev, _ := s.Revision(ctx); rev != 3 {
		t.Fatalf("revision %d, want 3", rev)
	}
	w := datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann", "folder:b#editor@user:bob")}
	if err := s.ApplyAt(ctx, 7, datastore.Batch{Write: w, Meta: map[string][]byte{"k": []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if ok, err := fixture.CheckText(ctx, s, "folder:a", "read", "user:ann"); err != nil || !ok {
		t.Fatalf("check = %v, %v", ok, err)
	}
	if v, _ := s.ReplicaMeta(ctx, "k"); string(v) != "v" {
		t.Fatalf("meta = %q", v)
	}
	if err := s.ApplyAt(ctx, 7, datastore.Batch{}); !errors.Is(err, datastore.ErrRevisionApplied) {
		t.Fatalf("reapply = %v, want ErrRevisionApplied", err)
	}

	tests := []struct {
		name  string
		batch datastore.Batch
		cause error
	}{
		{"precondition", datastore.Batch{Write: datastore.WriteRequest{
			Touches:       fixture.Tuples(t, "folder:c#viewer@user:cat"),
			Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "zzz"}, MustExist: true}},
		}}, datastore.ErrPreconditionFailed},
		{"invalid tuple", datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:c#owner@user:cat")}}, datastore.ErrInvalidTuple},
		{"orphans", datastore.Batch{Schema: mustParseSchema(t, "types:\n  user: {}\n  folder:\n    relations:\n      viewer: [user]\n")}, datastore.ErrSchemaOrphans},
	}
	rev := datastore.Revision(7)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := export(t, s)
			rev++
			err := s.ApplyAt(ctx, rev, tt.batch)
			if !errors.Is(err, datastore.ErrBatchRejected) || !errors.Is(err, tt.cause) {
				t.Fatalf("ApplyAt = %v, want ErrBatchRejected and %v", err, tt.cause)
			}
			if got, _ := s.Revision(ctx); got != rev {
				t.Fatalf("revision %d, want %d (a rejected batch still takes its revision)", got, rev)
			}
			if after := export(t, s); after != before {
				t.Fatalf("a rejected batch changed the store:\n%s\nwant\n%s", after, before)
			}
		})
	}

	// A forced schema write drops the orphans, in the changelog too.
	rev++
	if err := s.ApplyAt(ctx, rev, datastore.Batch{Force: true, Schema: mustParseSchema(t, "types:\n  user: {}\n  folder:\n    relations:\n      viewer: [user]\n")}); err != nil {
		t.Fatal(err)
	}
	if got := export(t, s); got != "folder:a#viewer@user:ann\n" {
		t.Fatalf("after forced schema: %q", got)
	}
	var seen []datastore.Revision
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for cs, err := range s.Watch(wctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, cs.Revision)
		if cs.Revision == rev {
			if !cs.Schema || len(cs.Changes) != 1 || cs.Changes[0].Op != datastore.OpDelete {
				t.Fatalf("forced schema change set %+v", cs)
			}
			break
		}
	}
	if want := []datastore.Revision{3, 7, 8, 9, 10, 11}; !equalRevs(seen, want) {
		t.Fatalf("watched revisions %v, want %v", seen, want)
	}
}

func equalRevs(a, b []datastore.Revision) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCheckWrite(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	if _, err := s.CheckWrite(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}); !errors.Is(err, datastore.ErrNoSchema) {
		t.Fatalf("no schema: %v", err)
	}
	if err := s.ApplyAt(ctx, 1, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyAt(ctx, 2, datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  datastore.WriteRequest
		want error
	}{
		{"ok", datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:b#viewer@user:ann")}, nil},
		{"must exist holds", datastore.WriteRequest{Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "a"}, MustExist: true}}}, nil},
		{"must not exist fails", datastore.WriteRequest{Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "a"}}}}, datastore.ErrPreconditionFailed},
		{"invalid", datastore.WriteRequest{Deletes: fixture.Tuples(t, "file:a#viewer@user:ann")}, datastore.ErrInvalidTuple},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := s.CheckWrite(ctx, tt.req)
			if rev != 2 || !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("CheckWrite = %d, %v; want 2, %v", rev, err, tt.want)
			}
		})
	}
	shrink := mustParseSchema(t, "types:\n  user: {}\n  folder:\n    relations:\n      editor: [user]\n")
	if _, err := s.CheckSchema(ctx, shrink, false); !errors.Is(err, datastore.ErrSchemaOrphans) {
		t.Fatalf("CheckSchema = %v, want orphans", err)
	}
	if _, err := s.CheckSchema(ctx, shrink, true); err != nil {
		t.Fatalf("CheckSchema force = %v", err)
	}
}

func TestBackupRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := openTemp(t, datastore.Config{})
	if err := src.ApplyAt(ctx, 5, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	if err := src.ApplyAt(ctx, 6, datastore.Batch{
		Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann", "folder:a#editor@user:bob")},
		Meta:  map[string][]byte{"policy": []byte("p1")},
	}); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	rev, n, err := src.Backup(ctx, f)
	if err != nil || rev != 6 || n == 0 {
		t.Fatalf("Backup = %d, %d, %v", rev, n, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := datastore.SnapshotRevision(snap); err != nil || got != 6 {
		t.Fatalf("SnapshotRevision = %d, %v", got, err)
	}

	// The destination has other content at an older revision.
	dst := openTemp(t, datastore.Config{})
	if err := dst.ApplyAt(ctx, 1, datastore.Batch{Schema: mustParseSchema(t, "types:\n  user: {}\n  doc:\n    relations:\n      owner: [user]\n")}); err != nil {
		t.Fatal(err)
	}
	if err := dst.ApplyAt(ctx, 2, datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:x#owner@user:zed")}}); err != nil {
		t.Fatal(err)
	}
	got, err := dst.Restore(ctx, snap)
	if err != nil || got != 6 {
		t.Fatalf("Restore = %d, %v", got, err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the snapshot on the data file's file system was not moved into place: %v", err)
	}
	if a, b := export(t, src), export(t, dst); a != b {
		t.Fatalf("restored export\n%s\nwant\n%s", b, a)
	}
	if ok, err := fixture.CheckText(ctx, dst, "folder:a", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("check after restore = %v, %v", ok, err)
	}
	if v, _ := dst.ReplicaMeta(ctx, "policy"); string(v) != "p1" {
		t.Fatalf("meta after restore = %q", v)
	}
	if r, _ := dst.Revision(ctx); r != 6 {
		t.Fatalf("revision after restore %d", r)
	}
	// Applying continues from the restored revision.
	if err := dst.ApplyAt(ctx, 7, datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:c#viewer@user:cat")}}); err != nil {
		t.Fatal(err)
	}
	backup(t, src, snap)
	if _, err := dst.Restore(ctx, snap); !errors.Is(err, datastore.ErrRevisionApplied) {
		t.Fatalf("restoring an older snapshot = %v, want ErrRevisionApplied", err)
	}
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("a refused snapshot was not left alone: %v", err)
	}
}

// backup writes a Backup of s to path.
func backup(t *testing.T, s *datastore.BoltStore, path string) datastore.Revision {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rev, _, err := s.Backup(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestRestoreWhileReading restores snapshots into a store while checks
// and reads run on it (-race): each read sees one store or the other,
// never an error, and after each restore the new content.
func TestRestoreWhileReading(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := openTemp(t, datastore.Config{})
	if err := src.ApplyAt(ctx, 1, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	dst := openTemp(t, datastore.Config{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rev, err := dst.Revision(ctx)
				if err != nil {
					errc <- err
					return
				}
				ok, err := fixture.CheckText(ctx, dst, "folder:a", "read", "user:ann")
				if rev == 0 && errors.Is(err, datastore.ErrNoSchema) {
					continue // before the first restore
				}
				if err != nil {
					errc <- fmt.Errorf("check at revision >= %d: %w", rev, err)
					return
				}
				if rev >= 2 && !ok {
					errc <- fmt.Errorf("ann cannot read folder:a at revision >= %d", rev)
					return
				}
				if _, err := dst.Read(ctx, datastore.Filter{ObjectType: "folder"}); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	for i := range 20 {
		rev := datastore.Revision(2 + i)
		if err := src.ApplyAt(ctx, rev, datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann", fmt.Sprintf("folder:f%d#viewer@user:u%d", i, i))}}); err != nil {
			t.Fatal(err)
		}
		snap := filepath.Join(dir, fmt.Sprintf("snap-%d.db", i))
		backup(t, src, snap)
		if got, err := dst.Restore(ctx, snap); err != nil || got != rev {
			t.Fatalf("Restore = %d, %v, want %d", got, err, rev)
		}
		if a, b := export(t, src), export(t, dst); a != b {
			t.Fatalf("after restore %d: export\n%s\nwant\n%s", rev, b, a)
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if err := dst.Health(); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreRefusesDamagedSnapshot: a snapshot that is not a store, or
// that is damaged, is refused before anything changes, and the store
// stays healthy.
func TestRestoreRefusesDamagedSnapshot(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src := openTemp(t, datastore.Config{})
	if err := src.ApplyAt(ctx, 1, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	dst := openTemp(t, datastore.Config{})
	before := export(t, dst)
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, bytes.Repeat([]byte("not a store "), 2000), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Restore(ctx, junk); err == nil {
		t.Fatal("Restore took a file that is not a store")
	}
	snap := filepath.Join(dir, "snap.db")
	backup(t, src, snap)
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	// Damage the root page of the first bucket (the page after the two
	// meta pages and the free list).
	for i := 3 * 4096; i < 4*4096 && i < len(b); i++ {
		b[i] ^= 0xa5
	}
	if err := os.WriteFile(snap, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Restore(ctx, snap); err == nil {
		t.Fatal("Restore took a damaged snapshot")
	}
	if err := dst.Health(); err != nil {
		t.Fatalf("a refused snapshot made the store unhealthy: %v", err)
	}
	if after := export(t, dst); after != before {
		t.Fatalf("a refused snapshot changed the store")
	}
	if r, _ := dst.Revision(ctx); r != 0 {
		t.Fatalf("revision %d after refused restores", r)
	}
}

// TestRestoreAcrossFileSystems: a snapshot on another file system than
// the data file's is copied, and left where it was.
func TestRestoreAcrossFileSystems(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "nexus-restore-")
	if err != nil {
		t.Skip("no /dev/shm")
	}
	defer os.RemoveAll(shm)
	probe, other := filepath.Join(shm, "probe"), filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Skip(err)
	}
	if os.Rename(probe, other) == nil {
		t.Skip("/dev/shm is on the same file system as the test's temporary directory")
	}
	ctx := context.Background()
	src := openTemp(t, datastore.Config{})
	if err := src.ApplyAt(ctx, 1, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	if err := src.ApplyAt(ctx, 2, datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}}); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(shm, "snap.db")
	backup(t, src, snap)
	dst := openTemp(t, datastore.Config{})
	if got, err := dst.Restore(ctx, snap); err != nil || got != 2 {
		t.Fatalf("Restore = %d, %v", got, err)
	}
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("a snapshot on another file system was not copied: %v", err)
	}
	if a, b := export(t, src), export(t, dst); a != b {
		t.Fatalf("restored export\n%s\nwant\n%s", b, a)
	}
}

// TestApplyRun: a run of batches in one transaction leaves the store as
// the same batches applied one by one.
func TestApplyRun(t *testing.T) {
	ctx := context.Background()
	grown := replicaSchema + "  doc:\n    relations:\n      owner: [user]\n"
	run := []datastore.Batch{
		{Schema: mustParseSchema(t, replicaSchema)},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:d#owner@user:ann")}}, // not in the schema yet
		{Schema: mustParseSchema(t, grown), Meta: map[string][]byte{"k": []byte("v")}},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:d#owner@user:ann"),
			Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "a"}, MustExist: true}}}},
		{Write: datastore.WriteRequest{Deletes: fixture.Tuples(t, "folder:a#viewer@user:ann"),
			Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "doc", ObjectID: "zzz"}, MustExist: true}}}},
	}
	one := openTemp(t, datastore.Config{})
	var want []error
	for i, b := range run {
		want = append(want, one.ApplyAt(ctx, datastore.Revision(10+i), b))
	}
	all := openTemp(t, datastore.Config{})
	got, err := all.ApplyRun(ctx, 10, run)
	if err != nil {
		t.Fatal(err)
	}
	for i := range run {
		if (got[i] == nil) != (want[i] == nil) || got[i] != nil && got[i].Error() != want[i].Error() {
			t.Fatalf("batch %d: run says %v, one by one %v", i, got[i], want[i])
		}
	}
	if want[2] == nil || want[5] == nil || want[4] != nil {
		t.Fatalf("unexpected results %v", want)
	}
	if a, b := export(t, one), export(t, all); a != b || a != "folder:a#viewer@user:ann\ndoc:d#owner@user:ann\n" {
		t.Fatalf("run export %q, one by one %q", b, a)
	}
	for _, s := range []*datastore.BoltStore{one, all} {
		if rev, _ := s.Revision(ctx); rev != 15 {
			t.Fatalf("revision %d, want 15", rev)
		}
		if ok, err := fixture.CheckText(ctx, s, "doc:d", "owner", "user:ann"); err != nil || !ok {
			t.Fatalf("check after run: %v, %v", ok, err)
		}
	}
	if _, err := all.ApplyRun(ctx, 15, run[:1]); !errors.Is(err, datastore.ErrRevisionApplied) {
		t.Fatalf("ApplyRun at an applied revision = %v", err)
	}
}

// TestApplyRunTouchThenDelete: a tuple touched by one batch of a run and
// deleted by a later one is gone, and the changelog has both changes.
func TestApplyRunTouchThenDelete(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	res, err := s.ApplyRun(ctx, 1, []datastore.Batch{
		{Schema: mustParseSchema(t, replicaSchema)},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}},
		{Write: datastore.WriteRequest{Deletes: fixture.Tuples(t, "folder:a#viewer@user:ann"), Touches: fixture.Tuples(t, "folder:b#viewer@user:bob")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("batch %d: %v", i, e)
		}
	}
	if got := export(t, s); got != "folder:b#viewer@user:bob\n" {
		t.Fatalf("export %q", got)
	}
	var changes []int
	for _, cs := range watchThrough(t, s, 1, 4) {
		changes = append(changes, len(cs.Changes))
	}
	if fmt.Sprint(changes) != "[1 0 2]" {
		t.Fatalf("changes per revision %v, want [1 0 2] (touch, touch of a present tuple, delete and touch)", changes)
	}
}

// TestApplyRunSharesSnapshot: checks made while runs of tuple writes
// apply go on sharing one read transaction (each run publishes one new
// one) instead of each beginning its own.
func TestApplyRunSharesSnapshot(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	if _, err := s.ApplyRun(ctx, 1, []datastore.Batch{
		{Schema: mustParseSchema(t, replicaSchema)},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:base#viewer@user:ann")}},
	}); err != nil {
		t.Fatal(err)
	}
	const runs, readers = 40, 4
	before := s.ReadTxCount()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var checks atomic.Int64
	errs := make(chan error, readers)
	for range readers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rev, _ := s.Revision(ctx)
				ok, err := fixture.CheckText(ctx, s, "folder:base", "read", "user:ann")
				if err != nil || !ok {
					errs <- fmt.Errorf("check at revision %d: %v, %v", rev, ok, err)
					return
				}
				if _, err := fixture.CheckText(ctx, s, "folder:p", "read", "user:x"); err != nil {
					errs <- err
					return
				}
				checks.Add(2)
			}
		})
	}
	for i := range runs {
		var b datastore.Batch
		if i%2 == 0 {
			b.Write.Touches = fixture.Tuples(t, "folder:q#viewer@user:x", "folder:p#viewer@user:x")
		} else {
			b.Write.Deletes = fixture.Tuples(t, "folder:p#viewer@user:x", "folder:q#viewer@user:x")
		}
		if _, err := s.ApplyRun(ctx, datastore.Revision(3+2*i), []datastore.Batch{b, {}}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// One snapshot published per run; a few more for checks that met one
	// retired between their load and their reference.
	if txs := s.ReadTxCount() - before; txs > runs+readers*4 {
		t.Fatalf("%d read transactions for %d checks during %d runs: checks began their own", txs, checks.Load(), runs)
	}
}

// TestApplyRunMiddleRejected: in a run of three tuple writes whose middle
// one fails its precondition at apply time, the first and the last apply,
// the middle one changes nothing, and each keeps its own revision.
func TestApplyRunMiddleRejected(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, datastore.Config{})
	if err := s.ApplyAt(ctx, 7, datastore.Batch{Schema: mustParseSchema(t, replicaSchema)}); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyRun(ctx, 8, []datastore.Batch{
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:a#viewer@user:ann")}},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:b#viewer@user:bob"),
			// folder:a has a tuple since revision 8: the precondition fails.
			Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "a"}, MustExist: false}}}},
		{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:c#viewer@user:cid"),
			Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "folder", ObjectID: "a"}, MustExist: true}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || res[2] != nil {
		t.Fatalf("results %v: the first and last should apply", res)
	}
	if !errors.Is(res[1], datastore.ErrBatchRejected) || !errors.Is(res[1], datastore.ErrPreconditionFailed) || !strings.Contains(res[1].Error(), "revision 9") {
		t.Fatalf("middle result %v, want a rejection at revision 9 for its precondition", res[1])
	}
	if got := export(t, s); got != "folder:a#viewer@user:ann\nfolder:c#viewer@user:cid\n" {
		t.Fatalf("export %q", got)
	}
	if rev, _ := s.Revision(ctx); rev != 10 {
		t.Fatalf("revision %d, want 10", rev)
	}
	var got []string
	for _, cs := range watchThrough(t, s, 7, 10) {
		got = append(got, fmt.Sprintf("%d:%d", cs.Revision, len(cs.Changes)))
	}
	if fmt.Sprint(got) != "[8:1 9:0 10:1]" {
		t.Fatalf("change sets %v, want [8:1 9:0 10:1]", got)
	}
}
