package datastore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	"github.com/nexuspdp/nexus/datastore/schema"
	bolt "go.etcd.io/bbolt"
)

// Every transaction that changes the store is in this file: Write,
// WriteSchema and the import's (importTx). Each changes the indexes and
// then calls bumpRev, which adds one revision and its change set to the
// changelog; once it commits, committed publishes the revision and the
// caller wakes watchers (signal).

// WriteRequest is one atomic write.
type WriteRequest struct {
	Touches       []api.Tuple
	Deletes       []api.Tuple
	Preconditions []Precondition
}

// Precondition must hold for a Write to apply: some tuple matches Filter
// (MustExist) or none does (!MustExist).
type Precondition struct {
	Filter    Filter
	MustExist bool
}

// Write applies a WriteRequest atomically.
func (s *BoltStore) Write(ctx context.Context, req WriteRequest) (_ Revision, err error) {
	defer s.guard("write", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if err := s.writable("write"); err != nil {
		return 0, err
	}
	st := s.state.Load()
	if err := validateWrite(st, req); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.writeBegin()
	defer s.writeEnd()
	var rev Revision
	err = s.batch("write", func(tx *bolt.Tx) error {
		if cur := s.state.Load(); cur != st {
			// The schema changed since validation: validate again.
			st = cur
			if err := validateWrite(st, req); err != nil {
				return err
			}
		}
		if rejected, err := s.checkPreconditions(tx, st, req.Preconditions); err != nil {
			return err
		} else if rejected != nil {
			return rejected
		}
		cs := &ChangeSet{Time: time.Now()}
		if err := applyTuples(tx, st, req, cs); err != nil {
			return err
		}
		enc, err := encodeChangeSet(st.Dict, cs)
		if err != nil {
			return err
		}
		rev, err = s.bumpRev(tx, cs, enc)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrInvalidTuple) || errors.Is(err, ErrCorrupt) {
			return 0, err
		}
		return 0, fmt.Errorf("datastore: write: %w", err)
	}
	s.signal()
	return rev, nil
}

// afterSchemaCommit, when set (by tests only), runs between a schema
// write's commit and the publication of its state.
var afterSchemaCommit func()

// WriteSchema stores a schema; see Store.
func (s *BoltStore) WriteSchema(ctx context.Context, sc *schema.Schema, force bool) (_ Revision, err error) {
	defer s.guard("schema write", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if err := s.writable("schema write"); err != nil {
		return 0, err
	}
	if sc == nil {
		return 0, fmt.Errorf("%w: nil schema", ErrInvalidSchema)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeBegin()
	defer s.writeEnd()
	var rev Revision
	var newState *state
	endState := s.stateWriteBegin()
	defer endState(nil)
	err = s.db.Update(func(tx *bolt.Tx) error {
		cs := &ChangeSet{Time: time.Now(), Schema: true}
		next, rejected, err := s.applySchema(ctx, tx, s.state.Load(), sc, force, cs)
		if err != nil {
			return err
		}
		if rejected != nil {
			return rejected
		}
		enc, err := encodeChangeSet(next.Dict, cs)
		if err != nil {
			return err
		}
		rev, err = s.bumpRev(tx, cs, enc)
		newState = next
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("datastore: write schema: %w", err)
	}
	if afterSchemaCommit != nil {
		afterSchemaCommit()
	}
	endState(newState)
	s.signal()
	s.log.Info("schema written", "revision", rev)
	return rev, nil
}

// findOrphans lists stored tuples of the types whose relations or accepted
// subject types shrink from old to next, that next does not allow.
func (s *BoltStore) findOrphans(ctx context.Context, tx *bolt.Tx, old *state, next *schema.Schema) ([]api.Tuple, error) {
	var out []api.Tuple
	nextTypes := next.Types()
	for _, tn := range old.Graph.Types() {
		shrinks := !slices.Contains(nextTypes, tn)
		if !shrinks {
			for _, rel := range old.Graph.Relations(tn) {
				// nil when next has no such relation (or a permission
				// of that name): a relation accepts at least one type.
				nallowed := next.AllowedSubjects(tn, rel)
				if nallowed == nil {
					shrinks = true
					break
				}
				for _, a := range old.Graph.AllowedSubjects(tn, rel) {
					if !slices.Contains(nallowed, a) {
						shrinks = true
					}
				}
			}
		}
		if !shrinks {
			continue
		}
		typeID, _ := old.Dict.ID(tn)
		prefix := binary.AppendUvarint(nil, typeID)
		c := tx.Bucket(bObj).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			t, err := index.DecodeTuple(old.Dict, k)
			if err != nil {
				return nil, err
			}
			if next.ValidateTuple(t) != nil {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

func deleteKeys(tx *bolt.Tx, n index.IDs, t api.Tuple) error {
	if err := tx.Bucket(bObj).Delete(index.AppendObjKey(nil, n, t.Object.ID, t.Subject.ID)); err != nil {
		return err
	}
	return tx.Bucket(bSubj).Delete(index.AppendSubjKey(nil, n, t.Object.ID, t.Subject.ID))
}

// bumpRev increments the revision, appends cs to the changelog and prunes
// what the retention no longer keeps.
func (s *BoltStore) bumpRev(tx *bolt.Tx, cs *ChangeSet, encoded []byte) (Revision, error) {
	rev := readRev(tx) + 1
	m := tx.Bucket(bMeta)
	if err := m.Put(kRev, index.BE64(uint64(rev))); err != nil {
		return 0, err
	}
	tx.OnCommit(func() { s.committed(rev) })
	cs.Revision = rev
	lb := tx.Bucket(bLog)
	if err := lb.Put(index.BE64(uint64(rev)), encoded); err != nil {
		return 0, err
	}
	keep := uint64(s.cfg.ChangelogRetention)
	if uint64(rev) > keep {
		cut := uint64(rev) - keep // revisions <= cut are dropped
		start := binary.BigEndian.Uint64(m.Get(kLogStart))
		if start <= cut {
			c := lb.Cursor()
			for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= cut; k, _ = c.Next() {
				if err := c.Delete(); err != nil {
					return 0, err
				}
			}
			if err := m.Put(kLogStart, index.BE64(cut+1)); err != nil {
				return 0, err
			}
		}
	}
	return rev, nil
}

func readRev(tx *bolt.Tx) Revision {
	v := tx.Bucket(bMeta).Get(kRev)
	if len(v) != 8 {
		return 0
	}
	return Revision(binary.BigEndian.Uint64(v))
}

// committed records rev once its transaction has committed. Commit
// handlers run after bbolt's write lock is released, so two may run out
// of order: the revision only moves forward.
func (s *BoltStore) committed(rev Revision) {
	for {
		cur := s.rev.Load()
		if uint64(rev) <= cur || s.rev.CompareAndSwap(cur, uint64(rev)) {
			return
		}
	}
}

// Revision returns the latest committed revision.
func (s *BoltStore) Revision(ctx context.Context) (Revision, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	return Revision(s.rev.Load()), nil
}

// importTx runs fill in one write transaction that adds a revision whose
// change set fill appends to the given header.
func (s *BoltStore) importTx(st *state, fill func(tx *bolt.Tx, log []byte) ([]byte, error)) (_ Revision, err error) {
	defer s.guard("import", debug.SetPanicOnFault(true), &err)
	if err := s.writable("import"); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.state.Load() != st {
		return 0, errors.New("the schema changed during the import")
	}
	s.writeBegin()
	defer s.writeEnd()
	var rev Revision
	err = s.db.Update(func(tx *bolt.Tx) error {
		enc := binary.AppendUvarint(make([]byte, 0, 1<<16), uint64(time.Now().UnixNano()))
		enc = binary.AppendUvarint(enc, 0)
		enc, err := fill(tx, enc)
		if err != nil {
			return err
		}
		rev, err = s.bumpRev(tx, &ChangeSet{}, enc)
		return err
	})
	return rev, err
}
