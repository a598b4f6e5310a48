package datastore

import (
	"os"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// snapshot is a read-only bbolt transaction shared by concurrent checks
// until the next write. bbolt documents a transaction as unsafe to share
// between goroutines; a read-only one is safe to share for what checks do
// with it (bbolt v1.5.0, read again on every upgrade): Bucket.Cursor only
// adds to an atomic statistic, and a cursor's Seek and Next read the
// transaction, its buckets and the memory-mapped pages, which are mapped
// read-only, and write nothing but the cursor itself; a read-only
// bucket caches no nodes or sub-buckets. Each Checker has its own cursor.
// TestSharedSnapshotHammer holds this to -race; BenchmarkSnapshot measures
// what it saves (see the Caveats in doc.go).
//
// A write retires the current snapshot before it starts (a write that
// grows the file remaps it, which waits for every open read transaction)
// and publishes a new one when no write is running; an apply run that
// cannot remap the file keeps it until it ends (writeBeginShared). The last release of a
// retired snapshot rolls it back, on whichever goroutine that is; nobody
// uses it afterwards (acquire checks that it is still current after
// taking its reference).
type snapshot struct {
	tx      *bolt.Tx
	obj     *bolt.Bucket
	subj    *bolt.Bucket
	refs    atomic.Int64
	retired atomic.Bool
	closed  atomic.Bool
}

// newSnapshot is the snapshot of tx, a read-only transaction.
func newSnapshot(tx *bolt.Tx) *snapshot {
	return &snapshot{tx: tx, obj: tx.Bucket(bObj), subj: tx.Bucket(bSubj)}
}

func (sn *snapshot) tryClose() {
	if sn.refs.Load() == 0 && sn.retired.Load() && sn.closed.CompareAndSwap(false, true) {
		_ = sn.tx.Rollback()
	}
}

func (sn *snapshot) release() {
	if sn.refs.Add(-1) == 0 && sn.retired.Load() {
		sn.tryClose()
	}
}

func (sn *snapshot) retire() {
	sn.retired.Store(true)
	sn.tryClose()
}

// shareSnapshots is false only in benchmarks that measure what sharing
// saves (export_test.go).
var shareSnapshots = true

// acquire returns the current snapshot, or a private one (own=true) while
// a write runs. Call release (or Rollback when own) when done.
func (s *BoltStore) acquire() (sn *snapshot, own bool, err error) {
	for i := 0; i < 4 && shareSnapshots; i++ {
		sn = s.snap.Load()
		if sn == nil {
			break
		}
		sn.refs.Add(1)
		if s.snap.Load() == sn {
			return sn, false, nil
		}
		sn.release()
	}
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, false, err
	}
	return newSnapshot(tx), true, nil
}

func (s *BoltStore) releaseSnap(sn *snapshot, own bool) {
	if own {
		_ = sn.tx.Rollback()
		return
	}
	sn.release()
}

// stateWriteBegin marks the start of a write that publishes a new state
// after its commit: reads that begin before it ends wait for it, so that
// none pairs the old state (its schema, its names) with the new data, or
// the new state with the old. The function it returns ends it,
// publishing st (nil: the state is unchanged); calls after the first do
// nothing, so a deferred end(nil) ends a write that failed or panicked.
func (s *BoltStore) stateWriteBegin() (end func(st *state)) {
	s.stateMu.Lock()
	s.stateGen.Add(1)
	ended := false
	return func(st *state) {
		if ended {
			return
		}
		ended = true
		if st != nil {
			s.state.Store(st)
		}
		s.stateGen.Add(1)
		s.stateMu.Unlock()
	}
}

// stateAndSnapshot returns the state in force and a read snapshot of the
// data it describes; the caller releases the snapshot (releaseSnap).
func (s *BoltStore) stateAndSnapshot() (*state, *snapshot, bool, error) {
	type held struct {
		sn  *snapshot
		own bool
	}
	st, h, err := withState(s, func() (held, error) {
		sn, own, err := s.acquire()
		return held{sn, own}, err
	}, func(h held) { s.releaseSnap(h.sn, h.own) })
	return st, h.sn, h.own, err
}

// viewState calls fn in a read transaction of its own with the state
// that describes its data.
func (s *BoltStore) viewState(fn func(tx *bolt.Tx, st *state) error) error {
	st, tx, err := withState(s, func() (*bolt.Tx, error) { return s.db.Begin(false) }, func(tx *bolt.Tx) { _ = tx.Rollback() })
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx, st)
}

// withState returns the state in force and what open returns, opened
// after the state was read with no state published in between; else it
// undoes what it opened and tries again. While a state is being
// published it waits for it.
func withState[T any](s *BoltStore, open func() (T, error), undo func(T)) (*state, T, error) {
	for {
		g := s.stateGen.Load()
		if g&1 != 0 {
			// Waiting for the writer is the point of this empty section.
			s.stateMu.RLock()
			//lint:ignore SA2001 the lock is taken only to wait for the writer
			s.stateMu.RUnlock()
			continue
		}
		st := s.state.Load()
		v, err := open()
		if err != nil {
			return nil, v, err
		}
		if s.stateGen.Load() == g {
			return st, v, nil
		}
		undo(v)
	}
}

// writeBegin retires the shared snapshot for the duration of a write.
func (s *BoltStore) writeBegin() {
	s.snapMu.Lock()
	s.writers++
	old := s.snap.Swap(nil)
	s.snapMu.Unlock()
	if old != nil {
		old.retire()
	}
}

// writeBeginShared is writeBegin for a write that allocates at most grow
// bytes of new pages: when that cannot make bbolt remap the file, checks
// go on sharing the current snapshot while the write runs (they see the
// state before it, as they would on transactions of their own, which
// cost each check a transaction and bbolt's meta lock), and writeEnd
// replaces it. It reports whether the snapshot was kept.
//
// bbolt remaps only when a commit's pages reach past the mapped size,
// which is never below initialMmapSize. A commit writes every node it
// changed to new pages: at most the whole tree once (the file's size)
// plus what it adds, and the free list. So a write keeps the snapshot
// while twice the file's size, plus grow, plus a margin for the free list
// and bbolt's growth step, stays below the initial map: a store of some
// 4 GB and more retires it as every write does.
func (s *BoltStore) writeBeginShared(grow int64) bool {
	const margin = 64 << 20
	if !shareSnapshots {
		s.writeBegin()
		return false
	}
	fi, err := os.Stat(s.cfg.Path)
	if err != nil || 2*fi.Size()+grow+margin >= initialMmapSize {
		s.writeBegin()
		return false
	}
	s.snapMu.Lock()
	s.writers++
	s.snapMu.Unlock()
	return true
}

// writeEnd publishes a new snapshot once no write runs.
func (s *BoltStore) writeEnd() {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.writers--
	if s.writers > 0 || s.closed.Load() {
		return
	}
	s.publishLocked()
}

func (s *BoltStore) publishLocked() {
	tx, err := s.db.Begin(false)
	if err != nil {
		s.log.Warn("datastore: no shared read snapshot", "err", err)
		return
	}
	sn := newSnapshot(tx)
	if old := s.snap.Swap(sn); old != nil {
		old.retire()
	}
}
