package check

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// State is what the checks read besides the indexes: the schema in force
// as a Graph (nil before a schema is written) and the name dictionary. A
// State is immutable once published.
type State struct {
	Graph *Graph
	Dict  *index.Dict
}

// Begin points c at one read snapshot: st, its obj and subj buckets, and
// the depth beyond which a check fails (ErrDepthExceeded). End ends it.
func (c *Checker) Begin(st *State, obj, subj *bolt.Bucket, maxDepth int) {
	c.st, c.objB, c.subjB, c.maxDepth = st, obj, subj, maxDepth
}

// Check reports whether sub has perm (a permission or a relation) on
// objType:objID, with its trace when trace is set.
func (c *Checker) Check(objType, objID, perm string, sub api.Subject, trace bool) (bool, *Trace, error) {
	st := c.st
	if st.Graph == nil {
		return false, nil, ErrNoSchema
	}
	td := st.Graph.types[objType]
	if td == nil {
		return false, nil, fmt.Errorf("%w: type %q", ErrUnknown, objType)
	}
	m := td.members[perm]
	if m == nil {
		return false, nil, fmt.Errorf("%w: %s has no relation or permission %q", ErrUnknown, objType, perm)
	}
	if !api.ValidID(objID) {
		return false, nil, fmt.Errorf("%w: invalid object id %q", api.ErrSyntax, objID)
	}
	if err := sub.Validate(); err != nil {
		return false, nil, err
	}
	if stype := st.Graph.types[sub.Type]; stype == nil {
		return false, nil, fmt.Errorf("%w: subject type %q", ErrUnknown, sub.Type)
	} else if sub.Relation != "" && stype.members[sub.Relation] == nil {
		return false, nil, fmt.Errorf("%w: subject %s: type %s has no relation or permission %q", ErrUnknown, sub, sub.Type, sub.Relation)
	}
	defer c.reset()
	c.begin(sub)
	c.cur.Use(c.objB)
	var root *Trace
	if trace {
		root = &Trace{Kind: "check"}
	}
	res, _, err := c.member(m, objID, 0, root)
	if err != nil {
		return false, nil, err
	}
	if root != nil {
		root.Result = res
		if len(root.Children) == 1 {
			root = root.Children[0]
		}
	}
	return res, root, nil
}

// AppendRoles appends the tenant roles subject holds directly in tenant
// (tuples tenant:<tenant>#role@subject) to dst.
func (c *Checker) AppendRoles(dst []string, subject api.Subject, tenant string) ([]string, error) {
	st := c.st
	if st.Graph == nil {
		return dst, ErrNoSchema
	}
	if st.Graph.TenantType() == "" {
		return dst, fmt.Errorf("%w: the schema declares no tenant roles", ErrUnknown)
	}
	if !api.ValidID(tenant) {
		return dst, fmt.Errorf("%w: invalid tenant id %q", api.ErrSyntax, tenant)
	}
	if err := subject.Validate(); err != nil {
		return dst, err
	}
	stID, ok1 := st.Dict.ID(subject.Type)
	srID, ok2 := st.Dict.ID(subject.Relation)
	ttID, ok3 := st.Dict.ID(st.Graph.TenantType())
	if !ok1 || !ok2 || !ok3 {
		return dst, nil
	}
	c.rolesCur.Use(c.subjB)
	// The subject's tuples are read whole and kept for the snapshot's later
	// calls: a check of the same subject that follows can then see that
	// no tuple could hold it and skip the walk.
	if kept, err := c.subject(stID, subject.ID); err != nil {
		return dst, err
	} else if kept {
		for _, te := range c.subj.tups {
			if te.sr != srID || te.ot != ttID || te.oid != tenant {
				continue
			}
			if name, ok := st.Dict.Name(te.rel); ok {
				dst = append(dst, name)
			}
		}
		return dst, nil
	}
	var buf [300]byte
	kb := index.AppendSubjPrefix(buf[:0], stID, subject.ID)
	kb = binary.AppendUvarint(kb, srID)
	kb = binary.AppendUvarint(kb, ttID)
	kb = append(kb, tenant...)
	kb = append(kb, 0)
	cur := &c.rolesCur
	for k := cur.Seek(kb); k != nil && bytes.HasPrefix(k, kb); k = cur.Next() {
		rel, rest, err := index.Uvarint(k[len(kb):])
		if err != nil || len(rest) != 0 {
			return dst, errors.Join(index.ErrBadKey, err)
		}
		if name, ok := st.Dict.Name(rel); ok {
			dst = append(dst, name)
		}
	}
	return dst, nil
}

// EachSubject calls fn with the subjects of object's tuples of relation,
// their IDs aliasing the snapshot, and stops at fn's first error (ctx's
// error after each subject).
func (c *Checker) EachSubject(ctx context.Context, object api.Object, relation string, fn func(api.Subject)) error {
	if object.Type == "" || !api.ValidID(object.ID) || relation == "" {
		return fmt.Errorf("%w: an object type, a valid id and a relation are needed, got %q#%q", api.ErrSyntax, object, relation)
	}
	st := c.st
	otID, ok1 := st.Dict.ID(object.Type)
	relID, ok2 := st.Dict.ID(relation)
	if !ok1 || !ok2 {
		return nil // a name never seen matches nothing
	}
	c.cur.Use(c.objB)
	// emit passes on one stored subject, as tupleFromIDs reads it,
	// without building the tuple.
	emit := func(stID, srID uint64, sid string) error {
		stName, ok1 := st.Dict.Name(stID)
		srName, ok2 := st.Dict.Name(srID)
		if !ok1 || !ok2 || !api.ValidID(sid) {
			return index.ErrBadKey
		}
		fn(api.Subject{Type: stName, ID: sid, Relation: srName})
		return ctx.Err()
	}
	// The object's tuples are read whole and kept for the snapshot's later
	// calls: a decision that asks for a resource's tenant and then checks
	// a permission on it seeks the resource once.
	if o, err := c.object(otID, object.ID); err != nil {
		return err
	} else if o != nil {
		for _, te := range c.tups[o.start:o.end] {
			if te.rel != relID {
				continue
			}
			if err := emit(te.st, te.sr, te.sid); err != nil {
				return err
			}
		}
		return nil
	}
	var buf [300]byte
	kb := index.AppendObjPrefix(buf[:0], otID, object.ID)
	kb = binary.AppendUvarint(kb, relID)
	for k := c.cur.Seek(kb); k != nil && bytes.HasPrefix(k, kb); k = c.cur.Next() {
		ids, oid, sid, err := index.DecodeObjKey(k)
		if err != nil {
			return err
		}
		if ids.OT != otID || ids.Rel != relID || string(oid) != object.ID {
			continue // an ID that merely starts like object's
		}
		if err := emit(ids.ST, ids.SR, index.Bstr(sid)); err != nil {
			return err
		}
	}
	return nil
}
