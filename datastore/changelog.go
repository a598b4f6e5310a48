package datastore

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// Op is what a change did.
type Op uint8

// Change operations.
const (
	OpTouch  Op = 1 // the tuple was inserted
	OpDelete Op = 2 // the tuple was removed
)

func (o Op) String() string {
	switch o {
	case OpTouch:
		return "touch"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Change is one tuple inserted or removed.
type Change struct {
	Op    Op
	Tuple api.Tuple
}

// ChangeSet is what one revision changed. Touches of tuples that already
// existed and deletes of missing tuples are not recorded. Schema is set on
// revisions that wrote a schema.
type ChangeSet struct {
	Revision Revision
	Time     time.Time
	Schema   bool
	Changes  []Change
}

// encodeChangeSet: index.Uvarint(unix nanos) index.Uvarint(flags) then per change:
// op byte, index.Uvarint(len(objkey)), objkey.
func encodeChangeSet(d *index.Dict, cs *ChangeSet) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(cs.Time.UnixNano()))
	flags := uint64(0)
	if cs.Schema {
		flags = 1
	}
	b = binary.AppendUvarint(b, flags)
	var kb []byte
	for _, c := range cs.Changes {
		n, ok := index.TupleIDs(d, c.Tuple)
		if !ok {
			return nil, fmt.Errorf("%w: %s: name not in dictionary", ErrInvalidTuple, c.Tuple)
		}
		kb = index.AppendObjKey(kb[:0], n, c.Tuple.Object.ID, c.Tuple.Subject.ID)
		b = appendChange(b, c.Op, kb)
	}
	return b, nil
}

// appendChange appends one change of an encoded change set to b.
func appendChange(b []byte, op Op, objKey []byte) []byte {
	b = append(b, byte(op))
	b = binary.AppendUvarint(b, uint64(len(objKey)))
	return append(b, objKey...)
}

func decodeChangeSet(d *index.Dict, rev Revision, v []byte) (ChangeSet, error) {
	cs := ChangeSet{Revision: rev}
	ns, v, err := index.Uvarint(v)
	if err != nil {
		return cs, err
	}
	cs.Time = time.Unix(0, int64(ns))
	flags, v, err := index.Uvarint(v)
	if err != nil {
		return cs, err
	}
	cs.Schema = flags&1 != 0
	for len(v) > 0 {
		op := Op(v[0])
		var l uint64
		if l, v, err = index.Uvarint(v[1:]); err != nil || l > uint64(len(v)) {
			return cs, index.ErrBadKey
		}
		t, err := index.DecodeTuple(d, v[:l])
		if err != nil {
			return cs, err
		}
		v = v[l:]
		cs.Changes = append(cs.Changes, Change{Op: op, Tuple: t})
	}
	return cs, nil
}

// Watch yields change sets after from; see Store.
func (s *BoltStore) Watch(ctx context.Context, from Revision) iter.Seq2[ChangeSet, error] {
	return func(yield func(ChangeSet, error) bool) {
		next := from + 1
		for {
			if err := s.check(ctx); err != nil {
				yield(ChangeSet{}, err)
				return
			}
			wait := s.waitChan()
			var batch []ChangeSet
			err := s.view("watch", func(tx *bolt.Tx, st *state) error {
				start := binary.BigEndian.Uint64(tx.Bucket(bMeta).Get(kLogStart))
				if rev := uint64(readRev(tx)); start > rev+1 {
					// The changelog cannot start after the store's own
					// revision: the meta bucket is damaged.
					return fmt.Errorf("%w: the changelog starts at revision %d, after the store's revision %d", index.ErrBadKey, start, rev)
				}
				if uint64(next) < start {
					return fmt.Errorf("%w: revision %d, oldest retained %d", ErrRevisionCompacted, next, start)
				}
				d := st.Dict
				c := tx.Bucket(bLog).Cursor()
				for k, v := c.Seek(index.BE64(uint64(next))); k != nil && len(batch) < 1024; k, v = c.Next() {
					cs, err := decodeChangeSet(d, Revision(binary.BigEndian.Uint64(k)), v)
					if err != nil {
						return err
					}
					batch = append(batch, cs)
				}
				return nil
			})
			if err != nil {
				yield(ChangeSet{}, err)
				return
			}
			for _, cs := range batch {
				if !yield(cs, nil) {
					return
				}
				next = cs.Revision + 1
			}
			if len(batch) > 0 {
				continue
			}
			select {
			case <-ctx.Done():
				yield(ChangeSet{}, ctx.Err())
				return
			case <-wait:
			}
		}
	}
}

// signal wakes watchers after a commit.
func (s *BoltStore) signal() {
	s.notifyMu.Lock()
	close(s.notify)
	s.notify = make(chan struct{})
	s.notifyMu.Unlock()
}

func (s *BoltStore) waitChan() <-chan struct{} {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	return s.notify
}
