package datastore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/check"
	"github.com/nexuspdp/nexus/datastore/internal/filecheck"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	"github.com/nexuspdp/nexus/datastore/schema"
	bolt "go.etcd.io/bbolt"
)

// Replication hooks. A replicated store (package cluster) does not write
// through Write and WriteSchema, which number revisions themselves: an
// ordered log numbers the writes, and every replica applies the log's
// entries with ApplyAt at the log's sequence numbers. CheckWrite and
// CheckSchema tell a writer, before it appends to the log, what Write and
// WriteSchema would have said, and at which revision that held. Backup and
// Restore move a whole store between replicas.
//
// A store applied to with ApplyAt must not also take Write, WriteSchema or
// Import: their revisions would collide with the log's.

// The errors of the replication hooks live here rather than in errors.go
// while the hooks are new; they are documented like the others.
var (
	// ErrBatchRejected is returned (wrapped, with the reason: a failed
	// precondition, an invalid tuple, orphaned tuples, no schema) by
	// ApplyAt when the batch does not apply to the state it meets. The
	// revision was recorded all the same, with no change: every replica
	// rejects the same batch the same way.
	ErrBatchRejected = errors.New("datastore: replicated batch rejected")
	// ErrRevisionApplied is returned by ApplyAt when the store is already
	// at or past the revision (nothing was written), and by Restore when
	// the snapshot is not newer than the store.
	ErrRevisionApplied = errors.New("datastore: revision already applied")
)

// bReplica holds replica metadata (Batch.Meta); it is created by the first
// ApplyAt that sets a key.
var bReplica = []byte("replica")

// Batch is one replicated write: a tuple write or a schema write, plus
// replica metadata, applied in one transaction at a revision the log chose.
type Batch struct {
	// Write is a tuple write: touches, deletes and their preconditions,
	// with the semantics of Store.Write.
	Write WriteRequest
	// Schema, when set, makes the batch a schema write with the semantics
	// of Store.WriteSchema (Force included); Write must then be empty.
	Schema *schema.Schema
	// Force drops the tuples a schema write orphans.
	Force bool
	// Meta sets replica metadata (read back with ReplicaMeta) in the same
	// transaction; a nil value deletes the key. It is written even when
	// the batch is rejected.
	Meta map[string][]byte
	// OnReject, if set and the batch is rejected, returns metadata written
	// after Meta in the same transaction (a replica records there why a
	// write did not apply, so that a retry of it gets the same answer).
	OnReject func(rejected error) map[string][]byte
	// Time is when the log accepted the batch; it is the change set's time
	// in the changelog. Zero means now.
	Time time.Time
}

// ApplyAt applies b in one transaction as revision rev, which must be
// greater than the store's revision (gaps are allowed: a snapshot may
// cover them). It returns nil when b applied, an error wrapping
// ErrBatchRejected (and the reason) when b does not apply to the current
// state, in which case rev is recorded with no change, or
// ErrRevisionApplied when the store is at or past rev. Any other error
// means nothing was written.
func (s *BoltStore) ApplyAt(ctx context.Context, rev Revision, b Batch) error {
	res, err := s.ApplyRun(ctx, rev, []Batch{b})
	if err != nil {
		return err
	}
	return res[0]
}

// ApplyRun is ApplyAt for consecutive revisions: batch i takes revision
// from+i, each applied to the state the ones before it left, all in one
// transaction (one commit, one fsync). It returns one result per batch
// (nil, or wrapping ErrBatchRejected) when the transaction committed;
// err (ErrRevisionApplied, or any other failure) means nothing was
// written.
func (s *BoltStore) ApplyRun(ctx context.Context, from Revision, bs []Batch) ([]error, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if s.cfg.ReadOnly {
		return nil, errors.New("datastore: apply: store opened read-only")
	}
	if from == 0 {
		return nil, errors.New("datastore: apply: revision 0 is the empty store")
	}
	schemas := make([]*schema.Schema, len(bs))
	exclusive := false
	for i, b := range bs {
		if b.Schema == nil {
			continue
		}
		if len(b.Write.Touches)+len(b.Write.Deletes)+len(b.Write.Preconditions) > 0 {
			return nil, errors.New("datastore: apply: a batch is a schema write or a tuple write, not both")
		}
		schemas[i] = b.Schema
		exclusive = true
	}
	if exclusive {
		s.mu.Lock()
		defer s.mu.Unlock()
	} else {
		s.mu.RLock()
		defer s.mu.RUnlock()
	}
	if cur := Revision(s.rev.Load()); from <= cur {
		return nil, fmt.Errorf("%w: revision %d, store at %d", ErrRevisionApplied, from, cur)
	}
	// A run of tuple writes lets checks keep the shared snapshot while it
	// runs, when it cannot grow the file past the map; a schema write
	// changes the state checks pair with their snapshot, and retires it.
	if exclusive {
		s.writeBegin()
	} else {
		s.writeBeginShared(runGrowth(bs))
	}
	defer s.writeEnd()
	endState := func(*state) {} // a run without a schema write keeps the state
	if exclusive {
		endState = s.stateWriteBegin()
		defer endState(nil)
	}
	results := make([]error, len(bs))
	var newState *state
	err := s.db.Update(func(tx *bolt.Tx) error {
		if cur := readRev(tx); from <= cur {
			return fmt.Errorf("%w: revision %d, store at %d", ErrRevisionApplied, from, cur)
		}
		st := s.state.Load()
		newState = nil
		for i, b := range bs {
			rev := from + Revision(i)
			cs := &ChangeSet{Time: b.Time}
			if cs.Time.IsZero() {
				cs.Time = time.Now()
			}
			var rejected, err error
			if schemas[i] != nil {
				cs.Schema = true
				var next *state
				next, rejected, err = s.applySchema(ctx, tx, st, schemas[i], b.Force, cs)
				if next != nil {
					st, newState = next, next
				}
			} else {
				rejected, err = s.applyWrite(tx, st, b.Write, cs)
			}
			if err != nil {
				return err
			}
			if rejected != nil {
				cs.Schema, cs.Changes = false, nil
				results[i] = fmt.Errorf("%w: revision %d: %w", ErrBatchRejected, rev, rejected)
			}
			if err := putMeta(tx, b.Meta); err != nil {
				return err
			}
			if rejected != nil && b.OnReject != nil {
				if err := putMeta(tx, b.OnReject(results[i])); err != nil {
					return err
				}
			}
			enc, err := encodeChangeSet(st.Dict, cs)
			if err != nil {
				return err
			}
			// bumpRev adds one to the stored revision and keeps the changelog.
			if err := tx.Bucket(bMeta).Put(kRev, index.BE64(uint64(rev)-1)); err != nil {
				return err
			}
			if _, err = s.bumpRev(tx, cs, enc); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("datastore: apply revisions %d..%d: %w", from, from+Revision(len(bs))-1, err)
	}
	endState(newState)
	s.signal()
	return results, nil
}

// runGrowth bounds the bytes of new pages a run of tuple writes adds to
// the file beyond rewriting what it changes (see writeBeginShared): for
// every key it puts or deletes, in either index or the changelog, a
// leaf and its branches (64 KiB, for trees five levels deep of 4 KiB pages
// split in three), plus four times the bytes it carries (names, metadata,
// a change set as a value) for values that take pages of their own.
func runGrowth(bs []Batch) int64 {
	var keys, bytes int64
	for _, b := range bs {
		keys += int64(2*(len(b.Write.Touches)+len(b.Write.Deletes))) + 4
		for _, ts := range [][]api.Tuple{b.Write.Touches, b.Write.Deletes} {
			for _, t := range ts {
				bytes += int64(len(t.Object.Type) + len(t.Object.ID) + len(t.Relation) + len(t.Subject.Type) + len(t.Subject.ID) + len(t.Subject.Relation) + 16)
			}
		}
		for k, v := range b.Meta {
			keys++
			bytes += int64(len(k) + len(v))
		}
		if b.OnReject != nil {
			keys++
			bytes += 1024
		}
	}
	return keys<<16 + 4*bytes
}

// applyWrite does what Write does inside its transaction. A batch that
// does not apply returns rejected and changes nothing.
func (s *BoltStore) applyWrite(tx *bolt.Tx, st *state, req WriteRequest, cs *ChangeSet) (rejected, err error) {
	if len(req.Touches)+len(req.Deletes)+len(req.Preconditions) == 0 {
		return nil, nil
	}
	if rejected = validateWrite(st, req); rejected != nil {
		return rejected, nil
	}
	if rejected, err = s.checkPreconditions(tx, st, req.Preconditions); rejected != nil || err != nil {
		return rejected, err
	}
	return nil, applyTuples(tx, st, req, cs)
}

// applyTuples deletes req's Deletes and then puts its Touches, skipping
// those already absent or present, and records each change in cs.
func applyTuples(tx *bolt.Tx, st *state, req WriteRequest, cs *ChangeSet) error {
	ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
	oc := ob.Cursor() // one for every lookup: present repositions it
	cs.Changes = slices.Grow(cs.Changes, len(req.Touches)+len(req.Deletes))
	var kb, sk []byte
	for _, t := range req.Deletes {
		n, _ := index.TupleIDs(st.Dict, t)
		kb = index.AppendObjKey(kb[:0], n, t.Object.ID, t.Subject.ID)
		if !present(oc, kb) {
			continue
		}
		if err := ob.Delete(kb); err != nil {
			return err
		}
		sk = index.AppendSubjKey(sk[:0], n, t.Object.ID, t.Subject.ID)
		if err := sb.Delete(sk); err != nil {
			return err
		}
		cs.Changes = append(cs.Changes, Change{Op: OpDelete, Tuple: t})
	}
	for _, t := range req.Touches {
		n, _ := index.TupleIDs(st.Dict, t)
		kb = index.AppendObjKey(kb[:0], n, t.Object.ID, t.Subject.ID)
		if present(oc, kb) {
			continue
		}
		if err := index.PutEntry(ob, kb); err != nil {
			return err
		}
		sk = index.AppendSubjKey(sk[:0], n, t.Object.ID, t.Subject.ID)
		if err := index.PutEntry(sb, sk); err != nil {
			return err
		}
		cs.Changes = append(cs.Changes, Change{Op: OpTouch, Tuple: t})
	}
	return nil
}

// present reports whether the bucket of cursor c holds key k. Tuple keys
// have empty values, and bbolt's Get returns nil for a key put with a nil
// value earlier in the same transaction, as for a missing key: a run of
// batches that touches a tuple and then deletes it would skip the delete.
// A cursor finds the key either way. Seek starts again from the bucket's
// root, so one cursor serves every lookup of a transaction, puts and
// deletes in between included (a cursor of its own each cost two
// allocations).
func present(c *bolt.Cursor, k []byte) bool {
	got, _ := c.Seek(k)
	return bytes.Equal(got, k)
}

// validateWrite checks every tuple of req against the schema in force.
func validateWrite(st *state, req WriteRequest) error {
	if st.Graph == nil {
		return ErrNoSchema
	}
	for _, ts := range [][]api.Tuple{req.Touches, req.Deletes} {
		for _, t := range ts {
			if err := st.Graph.ValidateTuple(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPreconditions evaluates pre in tx; rejected names the first that
// does not hold.
func (s *BoltStore) checkPreconditions(tx *bolt.Tx, st *state, pre []Precondition) (rejected, err error) {
	for i, p := range pre {
		found, err := s.exists(tx, st, p.Filter)
		if err != nil {
			return nil, err
		}
		if found != p.MustExist {
			return fmt.Errorf("%w: precondition %d (%+v, must exist %v)", ErrPreconditionFailed, i, p.Filter, p.MustExist), nil
		}
	}
	return nil, nil
}

// applySchema does what WriteSchema does inside its transaction. A schema
// that would orphan tuples without force returns rejected and changes
// nothing.
func (s *BoltStore) applySchema(ctx context.Context, tx *bolt.Tx, old *state, sc *schema.Schema, force bool, cs *ChangeSet) (next *state, rejected, err error) {
	var orphans []api.Tuple
	if old.Graph != nil {
		if orphans, err = s.findOrphans(ctx, tx, old, sc); err != nil {
			return nil, nil, err
		}
		if len(orphans) > 0 && !force {
			return nil, orphanError(orphans), nil
		}
	}
	d := &index.Dict{Numbers: make(map[string]uint64, len(old.Dict.Numbers)), Names: append([]string(nil), old.Dict.Names...)}
	for k, v := range old.Dict.Numbers {
		d.Numbers[k] = v
	}
	c := check.Compile(sc)
	db := tx.Bucket(bDict)
	for _, n := range c.Names() {
		if _, ok := d.Numbers[n]; ok {
			continue
		}
		id := uint64(len(d.Names))
		d.Numbers[n] = id
		d.Names = append(d.Names, n)
		if err := db.Put([]byte(n), binary.AppendUvarint(nil, id)); err != nil {
			return nil, nil, err
		}
	}
	for _, t := range orphans {
		n, _ := index.TupleIDs(d, t)
		if err := deleteKeys(tx, n, t); err != nil {
			return nil, nil, err
		}
		cs.Changes = append(cs.Changes, Change{Op: OpDelete, Tuple: t})
	}
	if err := tx.Bucket(bMeta).Put(kSchema, sc.Source()); err != nil {
		return nil, nil, err
	}
	c.Bind(d)
	return &state{Graph: c, Dict: d}, nil, nil
}

func orphanError(orphans []api.Tuple) *OrphanError {
	oe := &OrphanError{Count: len(orphans)}
	for i, t := range orphans {
		if i == 100 {
			break
		}
		oe.Examples = append(oe.Examples, t.String())
	}
	return oe
}

func putMeta(tx *bolt.Tx, meta map[string][]byte) error {
	if len(meta) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bReplica)
	if err != nil {
		return err
	}
	for k, v := range meta {
		if v == nil {
			err = b.Delete([]byte(k))
		} else {
			err = b.Put([]byte(k), v)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ReplicaMeta returns the replica metadata stored under key by ApplyAt, or
// nil if there is none.
func (s *BoltStore) ReplicaMeta(ctx context.Context, key string) ([]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bReplica); b != nil {
			out = bytes.Clone(b.Get([]byte(key)))
		}
		return nil
	})
	return out, err
}

// ReplicaMetaPrefix returns the replica metadata whose keys start with
// prefix (read in one transaction).
func (s *BoltStore) ReplicaMetaPrefix(ctx context.Context, prefix string) (map[string][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bReplica)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
			out[string(k)] = bytes.Clone(v)
		}
		return nil
	})
	return out, err
}

// CheckWrite reports what Write would say of req without writing: nil, or
// the error Write would return (ErrNoSchema, ErrInvalidTuple,
// ErrPreconditionFailed, all wrapped). It returns the revision of the
// state it checked, which a log writer uses as the expected last entry.
func (s *BoltStore) CheckWrite(ctx context.Context, req WriteRequest) (Revision, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	return s.dryRun("check write", func(tx *bolt.Tx, st *state) (rejected, err error) {
		if rejected = validateWrite(st, req); rejected != nil {
			return rejected, nil
		}
		return s.checkPreconditions(tx, st, req.Preconditions)
	})
}

// CheckSchema reports what WriteSchema would say of sc without writing:
// nil, or an *OrphanError when sc would orphan stored tuples and force is
// not set. It returns the revision of the state it checked.
func (s *BoltStore) CheckSchema(ctx context.Context, sc *schema.Schema, force bool) (Revision, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if sc == nil {
		return 0, fmt.Errorf("%w: nil schema", ErrInvalidSchema)
	}
	return s.dryRun("check schema", func(tx *bolt.Tx, old *state) (rejected, err error) {
		if old.Graph == nil || force {
			return nil, nil
		}
		orphans, err := s.findOrphans(ctx, tx, old, sc)
		if len(orphans) > 0 {
			rejected = orphanError(orphans)
		}
		return rejected, err
	})
}

// dryRun runs fn, which reports what a change would be rejected for, in a
// read transaction, and returns the revision of the state fn checked.
func (s *BoltStore) dryRun(what string, fn func(tx *bolt.Tx, st *state) (rejected, err error)) (Revision, error) {
	// Holding mu keeps the state in force and the transaction in step: a
	// schema apply stores its state before it lets go of mu.
	s.mu.RLock()
	defer s.mu.RUnlock()
	var rev Revision
	var rejected error
	err := s.db.View(func(tx *bolt.Tx) error {
		rev = readRev(tx)
		var err error
		rejected, err = fn(tx, s.state.Load())
		return err
	})
	if err != nil {
		return rev, fmt.Errorf("datastore: %s: %w", what, err)
	}
	return rev, rejected
}

// Backup writes a consistent copy of the data file to w (a bbolt file that
// Open and Restore accept) and returns the revision it holds and the bytes
// written. Reads and writes go on meanwhile.
func (s *BoltStore) Backup(ctx context.Context, w io.Writer) (Revision, int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, 0, err
	}
	var rev Revision
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		rev = readRev(tx)
		var err error
		n, err = tx.WriteTo(ctxWriter{ctx, w})
		return err
	})
	if err != nil {
		return 0, n, fmt.Errorf("datastore: backup: %w", err)
	}
	return rev, n, nil
}

// ctxWriter stops a long copy when its context ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// SnapshotRevision returns the revision held by the data file at path (a
// Backup), which must not be open.
func SnapshotRevision(path string) (Revision, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: defaultOpenTimeout})
	if err != nil {
		return 0, fmt.Errorf("datastore: snapshot %s: %w", path, err)
	}
	defer db.Close()
	var rev Revision
	err = db.View(func(tx *bolt.Tx) error {
		if err := checkFormat(tx, path); err != nil {
			return err
		}
		rev = readRev(tx)
		return nil
	})
	return rev, err
}

func checkFormat(tx *bolt.Tx, path string) error {
	m := tx.Bucket(bMeta)
	if m == nil {
		return fmt.Errorf("%w: %s has no meta bucket", ErrFormat, path)
	}
	if v := m.Get(kFormat); len(v) != 1 || v[0] != formatVersion {
		return fmt.Errorf("%w: %s: format %v, want %d", ErrFormat, path, v, formatVersion)
	}
	return nil
}

// Restore replaces the store's whole content (schema, tuples, changelog,
// replica metadata, revision) with that of the data file at path, a
// Backup. The file becomes the store's data file: it is moved into place
// when it is on the data file's file system (path is gone afterwards),
// else copied beside the data file first, so that memory stays bounded
// whatever its size. It is checked (its structure, as Open checks it, and
// its format) before anything is replaced; the switch is one rename, so a
// crash leaves either store whole. Reads go on meanwhile, on the old
// content until the switch; writes wait. The snapshot must be newer than
// the store (ErrRevisionApplied otherwise, and path is left alone).
// Watchers from before it get ErrRevisionCompacted if the snapshot's
// changelog does not reach back to them. It returns the revision
// restored.
func (s *BoltStore) Restore(ctx context.Context, path string) (_ Revision, err error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if s.cfg.ReadOnly {
		return 0, errors.New("datastore: restore: store opened read-only")
	}
	rev, err := SnapshotRevision(path)
	if err != nil {
		return 0, fmt.Errorf("datastore: restore: %w", err)
	}
	if cur := Revision(s.rev.Load()); rev <= cur {
		return 0, fmt.Errorf("%w: snapshot at revision %d, store at %d", ErrRevisionApplied, rev, cur)
	}
	staging := s.cfg.Path + ".restoring"
	_ = os.Remove(staging) // left by a crash
	defer os.Remove(staging)
	if err := moveOrCopy(ctx, path, staging); err != nil {
		return 0, fmt.Errorf("datastore: restore %s: %w", path, err)
	}
	db, newState, err := s.openRestored(staging, rev)
	if err != nil {
		return 0, fmt.Errorf("datastore: restore %s: %w", path, err)
	}
	var old *bolt.DB
	defer func() {
		if old != nil {
			// Waits for reads that began on it.
			if cerr := old.Close(); cerr != nil {
				s.log.Warn("datastore: closing the data file replaced by a restore", "err", cerr)
			}
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := Revision(s.rev.Load()); rev <= cur {
		_ = db.Close()
		return 0, fmt.Errorf("%w: snapshot at revision %d, store at %d", ErrRevisionApplied, rev, cur)
	}
	s.writeBegin()
	defer s.writeEnd()
	endState := s.stateWriteBegin()
	defer endState(nil)
	if err := os.Rename(staging, s.cfg.Path); err != nil {
		_ = db.Close()
		return 0, fmt.Errorf("datastore: restore %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(s.cfg.Path)); err != nil {
		s.log.Warn("datastore: restore: syncing the data directory", "err", err)
	}
	old = s.db.swap(db)
	endState(newState)
	s.committed(rev)
	s.signal()
	s.log.Info("datastore restored from a snapshot", "path", path, "revision", rev)
	return rev, nil
}

// moveOrCopy moves src to dst, or copies it (and removes nothing) across
// file systems, and makes dst durable.
func moveOrCopy(ctx context.Context, src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		var le *os.LinkError
		if !errors.As(err, &le) || !errors.Is(le.Err, syscall.EXDEV) {
			return err
		}
		if err := copyFile(ctx, src, dst); err != nil {
			_ = os.Remove(dst)
			return err
		}
	}
	f, err := os.OpenFile(dst, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyFile(ctx context.Context, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(ctxWriter{ctx, out}, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// openRestored opens the file at path as the store would open it and
// checks it as Open does (its structure, format, buckets, dictionary and
// schema), and that it holds revision rev. A damaged snapshot is a
// *CorruptError about it; the store itself stays healthy.
func (s *BoltStore) openRestored(path string, rev Revision) (db *bolt.DB, _ *state, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			}
			db, err = nil, &CorruptError{Path: path, Op: "restore", Err: fmt.Errorf("panic: %v", r)}
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	_, err = filecheck.Check(f, fi.Size(), false)
	f.Close()
	if err != nil {
		return nil, nil, &CorruptError{Path: path, Op: "restore", Err: err}
	}
	cfg := s.cfg
	cfg.Path = path
	if db, err = openBolt(cfg); err != nil {
		return nil, nil, err
	}
	var st *state
	err = db.View(func(tx *bolt.Tx) error {
		if err := checkFormat(tx, path); err != nil {
			return err
		}
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("%w: %s has no %s bucket", ErrFormat, path, b)
			}
		}
		if v := tx.Bucket(bMeta).Get(kLogStart); len(v) != 8 {
			return fmt.Errorf("%w: the changelog start is %d bytes long, want 8", index.ErrBadKey, len(v))
		}
		if got := readRev(tx); got != rev {
			return fmt.Errorf("%w: %s holds revision %d, it held %d", ErrFormat, path, got, rev)
		}
		var err error
		st, err = loadState(tx)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return db, st, nil
}
