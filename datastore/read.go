package datastore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime/debug"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	"github.com/nexuspdp/nexus/datastore/schema"
	bolt "go.etcd.io/bbolt"
)

// Filter selects tuples. Empty fields match anything; ObjectID needs
// ObjectType and SubjectID needs SubjectType. SubjectRelation matches the
// subject's relation exactly when set ("" matches any). Limit bounds the
// result (0 means no limit).
type Filter struct {
	ObjectType      string
	ObjectID        string
	Relation        string
	SubjectType     string
	SubjectID       string
	SubjectRelation string
	Limit           int
}

// Schema returns the current schema.
func (s *BoltStore) Schema(ctx context.Context) (*schema.Schema, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	sc := s.state.Load().Graph
	if sc == nil {
		return nil, ErrNoSchema
	}
	return sc.Schema, nil
}

// Read returns the tuples matching f.
func (s *BoltStore) Read(ctx context.Context, f Filter) (_ []api.Tuple, err error) {
	defer s.guard("read", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []api.Tuple
	err = s.viewState(func(tx *bolt.Tx, st *state) error {
		return s.scan(tx, st, f, func(t api.Tuple) bool {
			out = append(out, t)
			return ctx.Err() == nil
		})
	})
	if err == nil {
		err = ctx.Err()
	}
	return out, err
}

// exists reports whether some tuple matches f.
func (s *BoltStore) exists(tx *bolt.Tx, st *state, f Filter) (bool, error) {
	f.Limit = 1
	found := false
	err := s.scan(tx, st, f, func(api.Tuple) bool { found = true; return false })
	return found, err
}

// scan calls fn for each tuple matching f until fn returns false.
func (s *BoltStore) scan(tx *bolt.Tx, st *state, f Filter, fn func(api.Tuple) bool) error {
	if f.ObjectID != "" && f.ObjectType == "" || f.SubjectID != "" && f.SubjectType == "" || f.SubjectRelation != "" && f.SubjectType == "" {
		return fmt.Errorf("datastore: filter %+v: an ID or subject relation needs its type", f)
	}
	d := st.Dict
	lookup := func(name string) (uint64, bool) {
		if name == "" {
			return 0, true
		}
		return d.ID(name)
	}
	ot, ok1 := lookup(f.ObjectType)
	rel, ok2 := lookup(f.Relation)
	stp, ok3 := lookup(f.SubjectType)
	sr, ok4 := lookup(f.SubjectRelation)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil // a name never seen matches nothing
	}
	var prefix []byte
	useSubj := false
	switch {
	case f.ObjectType != "":
		prefix = binary.AppendUvarint(nil, ot)
		if f.ObjectID != "" {
			prefix = append(append(prefix, f.ObjectID...), 0)
			if f.Relation != "" {
				prefix = binary.AppendUvarint(prefix, rel)
			}
		}
	case f.SubjectType != "":
		useSubj = true
		prefix = binary.AppendUvarint(nil, stp)
		if f.SubjectID != "" {
			prefix = append(append(prefix, f.SubjectID...), 0)
		}
	}
	bucket, decode := bObj, index.DecodeObjKey
	if useSubj {
		bucket, decode = bSubj, index.DecodeSubjKey
	}
	c := tx.Bucket(bucket).Cursor()
	n := 0
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		index.MustEntry(k, v)
		ids, oid, sid, err := decode(k)
		if err != nil {
			return err
		}
		if f.ObjectType != "" && ids.OT != ot || f.ObjectID != "" && string(oid) != f.ObjectID ||
			f.Relation != "" && ids.Rel != rel || f.SubjectType != "" && ids.ST != stp ||
			f.SubjectID != "" && string(sid) != f.SubjectID || f.SubjectRelation != "" && ids.SR != sr {
			continue
		}
		t, err := index.TupleFromIDs(d, ids, oid, sid)
		if err != nil {
			return err
		}
		n++
		if !fn(t) || f.Limit > 0 && n >= f.Limit {
			return nil
		}
	}
	return nil
}
