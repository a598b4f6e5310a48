package datastore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// View reads one state of the store for several calls: what one decision
// asks (a resource's tenant, a subject's roles, a check) takes the read
// snapshot, the pooled cursors and the schema once instead of once per
// call. A View is valid only during the function given to
// BoltStore.View, on that function's goroutine.
type View struct {
	s   *BoltStore
	ctx context.Context
	st  *state
	sn  *snapshot
	own bool
	c   *checker
}

// View calls fn with a View of the store's current state and returns
// what fn returns. The store is checked (closed, ctx done) once, before
// fn. fn must not call the store's own methods (a write could wait for
// the View's snapshot, which waits for fn), nor keep the View, or a
// subject ID View.AppendSubjects returned, after it returns.
func (s *BoltStore) View(ctx context.Context, fn func(v *View) error) error {
	v, err := s.openView(ctx)
	if err != nil {
		return fmt.Errorf("datastore: view: %w", err)
	}
	defer s.endView(v)
	return fn(v)
}

func (s *BoltStore) openView(ctx context.Context) (_ *View, err error) {
	defer s.guard("view", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.beginView(ctx)
}

// beginView opens a View; the caller guards and calls endView.
func (s *BoltStore) beginView(ctx context.Context) (*View, error) {
	st, sn, own, err := s.stateAndSnapshot()
	if err != nil {
		return nil, err
	}
	c := s.pool.Get().(*checker)
	v := &c.view
	*v = View{s: s, ctx: ctx, st: st, sn: sn, own: own, c: c}
	return v, nil
}

func (s *BoltStore) endView(v *View) {
	c, sn, own := v.c, v.sn, v.own
	*v = View{}
	c.forget()
	s.pool.Put(c)
	s.releaseSnap(sn, own)
}

// Schema returns the schema in force, nil if none was written.
func (v *View) Schema() *schema.Schema { return v.st.schema.public() }

// Check is BoltStore.Check on the View's state.
func (v *View) Check(req CheckRequest) (_ CheckResult, err error) {
	defer v.s.guard("check", debug.SetPanicOnFault(true), &err)
	ok, tr, err := v.check(req.Object.Type, req.Object.ID, req.Permission, req.Subject, req.Trace)
	if err != nil {
		return CheckResult{}, fmt.Errorf("datastore: check %s#%s@%s: %w", req.Object, req.Permission, req.Subject, err)
	}
	return CheckResult{Allowed: ok, Trace: tr}, nil
}

// AppendRoles is BoltStore.AppendRoles on the View's state.
func (v *View) AppendRoles(dst []string, subject api.Subject, tenant string) (_ []string, err error) {
	defer v.s.guard("roles", debug.SetPanicOnFault(true), &err)
	return v.appendRoles(dst, subject, tenant)
}

// Preload does nothing and returns nil: the View's later calls read the
// tuples of object and those naming subject when they need them, and
// keep them for the rest of the View. It stays for the callers that
// still call it.
func (v *View) Preload(object api.Object, subject api.Subject) error { return nil }

// AppendSubjects appends the subjects of object's tuples of relation to
// dst, as BoltStore.AppendSubjects lists them, without their strings:
// each subject's ID is valid only until the function given to
// BoltStore.View returns (copy it to keep it), its type and relation as
// long as the schema's names.
func (v *View) AppendSubjects(dst []api.Subject, object api.Object, relation string) (_ []api.Subject, err error) {
	defer v.s.guard("read", debug.SetPanicOnFault(true), &err)
	err = v.eachSubject(object, relation, func(s api.Subject) { dst = append(dst, s) })
	return dst, err
}

func (v *View) check(objType, objID, perm string, sub api.Subject, trace bool) (bool, *Trace, error) {
	st := v.st
	if st.schema == nil {
		return false, nil, ErrNoSchema
	}
	td := st.schema.types[objType]
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
	if stype := st.schema.types[sub.Type]; stype == nil {
		return false, nil, fmt.Errorf("%w: subject type %q", ErrUnknown, sub.Type)
	} else if sub.Relation != "" && stype.members[sub.Relation] == nil {
		return false, nil, fmt.Errorf("%w: subject %s: type %s has no relation or permission %q", ErrUnknown, sub, sub.Type, sub.Relation)
	}
	c := v.c
	defer c.reset()
	c.begin(st, sub)
	c.maxDepth = v.s.cfg.MaxDepth
	c.cur.use(v.sn.obj)
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

func (v *View) appendRoles(dst []string, subject api.Subject, tenant string) ([]string, error) {
	st := v.st
	if st.schema == nil {
		return dst, ErrNoSchema
	}
	if st.schema.TenantType() == "" {
		return dst, fmt.Errorf("%w: the schema declares no tenant roles", ErrUnknown)
	}
	if !api.ValidID(tenant) {
		return dst, fmt.Errorf("%w: invalid tenant id %q", api.ErrSyntax, tenant)
	}
	if err := subject.Validate(); err != nil {
		return dst, err
	}
	stID, ok1 := st.dict.id(subject.Type)
	srID, ok2 := st.dict.id(subject.Relation)
	ttID, ok3 := st.dict.id(st.schema.TenantType())
	if !ok1 || !ok2 || !ok3 {
		return dst, nil
	}
	c := v.c
	c.rolesCur.use(v.sn.subj)
	// The subject's tuples are read whole and kept for the View's later
	// calls: a check of the same subject that follows can then see that
	// no tuple could hold it and skip the walk.
	if kept, err := c.subject(stID, subject.ID); err != nil {
		return dst, err
	} else if kept {
		for _, te := range c.subj.tups {
			if te.sr != srID || te.ot != ttID || te.oid != tenant {
				continue
			}
			if name, ok := st.dict.name(te.rel); ok {
				dst = append(dst, name)
			}
		}
		return dst, nil
	}
	var buf [300]byte
	kb := appendSubjPrefix(buf[:0], stID, subject.ID)
	kb = binary.AppendUvarint(kb, srID)
	kb = binary.AppendUvarint(kb, ttID)
	kb = append(kb, tenant...)
	kb = append(kb, 0)
	cur := &c.rolesCur
	for k := cur.Seek(kb); k != nil && bytes.HasPrefix(k, kb); k = cur.Next() {
		rel, rest, err := uvarint(k[len(kb):])
		if err != nil || len(rest) != 0 {
			return dst, errors.Join(errBadKey, err)
		}
		if name, ok := st.dict.name(rel); ok {
			dst = append(dst, name)
		}
	}
	return dst, nil
}

// eachSubject calls fn with the subjects of object's tuples of relation,
// their IDs aliasing the snapshot.
func (v *View) eachSubject(object api.Object, relation string, fn func(api.Subject)) error {
	if object.Type == "" || !api.ValidID(object.ID) || relation == "" {
		return fmt.Errorf("%w: an object type, a valid id and a relation are needed, got %q#%q", api.ErrSyntax, object, relation)
	}
	st := v.st
	otID, ok1 := st.dict.id(object.Type)
	relID, ok2 := st.dict.id(relation)
	if !ok1 || !ok2 {
		return nil // a name never seen matches nothing
	}
	c := v.c
	c.cur.use(v.sn.obj)
	// emit passes on one stored subject, as tupleFromIDs reads it,
	// without building the tuple.
	emit := func(stID, srID uint64, sid string) error {
		stName, ok1 := st.dict.name(stID)
		srName, ok2 := st.dict.name(srID)
		if !ok1 || !ok2 || !api.ValidID(sid) {
			return errBadKey
		}
		fn(api.Subject{Type: stName, ID: sid, Relation: srName})
		return v.ctx.Err()
	}
	// The object's tuples are read whole and kept for the View's later
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
	kb := appendObjPrefix(buf[:0], otID, object.ID)
	kb = binary.AppendUvarint(kb, relID)
	for k := c.cur.Seek(kb); k != nil && bytes.HasPrefix(k, kb); k = c.cur.Next() {
		ids, oid, sid, err := decodeObjKey(k)
		if err != nil {
			return err
		}
		if ids.ot != otID || ids.rel != relID || string(oid) != object.ID {
			continue // an ID that merely starts like object's
		}
		if err := emit(ids.st, ids.sr, bstr(sid)); err != nil {
			return err
		}
	}
	return nil
}
