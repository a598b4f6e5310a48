package datastore

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/check"
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
	c   *check.Checker // the View's own, kept when it goes back to the pool
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
	v := s.pool.Get().(*View)
	v.s, v.ctx, v.st, v.sn, v.own = s, ctx, st, sn, own
	v.c.Begin(st, sn.obj, sn.subj, s.cfg.MaxDepth)
	return v, nil
}

func (s *BoltStore) endView(v *View) {
	sn, own := v.sn, v.own
	v.c.End()
	v.s, v.ctx, v.st, v.sn = nil, nil, nil, nil
	s.pool.Put(v)
	s.releaseSnap(sn, own)
}

// Schema returns the schema in force, nil if none was written.
func (v *View) Schema() *schema.Schema { return v.st.Graph.Public() }

// Check is BoltStore.Check on the View's state.
func (v *View) Check(req CheckRequest) (_ CheckResult, err error) {
	defer v.s.guard("check", debug.SetPanicOnFault(true), &err)
	ok, tr, err := v.c.Check(req.Object.Type, req.Object.ID, req.Permission, req.Subject, req.Trace)
	if err != nil {
		return CheckResult{}, fmt.Errorf("datastore: check %s#%s@%s: %w", req.Object, req.Permission, req.Subject, err)
	}
	return CheckResult{Allowed: ok, Trace: tr}, nil
}

// AppendRoles is BoltStore.AppendRoles on the View's state.
func (v *View) AppendRoles(dst []string, subject api.Subject, tenant string) (_ []string, err error) {
	defer v.s.guard("roles", debug.SetPanicOnFault(true), &err)
	return v.c.AppendRoles(dst, subject, tenant)
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
	err = v.c.EachSubject(v.ctx, object, relation, func(s api.Subject) { dst = append(dst, s) })
	return dst, err
}
