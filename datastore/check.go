package datastore

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/check"
)

// CheckRequest asks whether Subject has Permission (a permission or a
// relation) on Object.
type CheckRequest struct {
	Object     api.Object
	Permission string
	Subject    api.Subject
	// Trace asks for an explanation of the decision in CheckResult.Trace.
	Trace bool
}

// CheckResult is the answer to a CheckRequest. Its JSON form is
// {"allowed": bool, "trace": {...}}.
type CheckResult struct {
	Allowed bool `json:"allowed"`
	// Trace explains the decision when CheckRequest.Trace was set.
	Trace *Trace `json:"trace,omitempty"`
}

// Trace is one node of a check's evaluation: a relation or permission of
// an object (Kind "relation" or "permission"), an operator of a permission
// expression ("union", "intersection", "exclusion"), an arrow ("arrow"), or
// a stored tuple that matched ("tuple"). Its JSON form has lower-case
// field names; String renders it as an indented tree.
type Trace = check.Trace

// Check evaluates req; see Store. It does not allocate when the answer
// needs no more than the pooled Checker's memory and no trace.
func (s *BoltStore) Check(ctx context.Context, req CheckRequest) (_ CheckResult, err error) {
	defer s.guard("check", debug.SetPanicOnFault(true), &err)
	ok, tr, err := s.check1(ctx, req.Object.Type, req.Object.ID, req.Permission, req.Subject, req.Trace)
	if err != nil {
		return CheckResult{}, fmt.Errorf("datastore: check %s#%s@%s: %w", req.Object, req.Permission, req.Subject, err)
	}
	return CheckResult{Allowed: ok, Trace: tr}, nil
}

func (s *BoltStore) check1(ctx context.Context, objType, objID, perm string, sub api.Subject, trace bool) (bool, *Trace, error) {
	if err := s.check(ctx); err != nil {
		return false, nil, err
	}
	v, err := s.beginView(ctx)
	if err != nil {
		return false, nil, err
	}
	defer s.endView(v)
	return v.c.Check(objType, objID, perm, sub, trace)
}

// AppendSubjects appends the subjects of object's tuples of relation to
// dst; see Store. It reads the shared snapshot through a pooled cursor, as
// AppendRoles does, and allocates only the subjects' strings.
func (s *BoltStore) AppendSubjects(ctx context.Context, dst []string, object api.Object, relation string) (_ []string, err error) {
	defer s.guard("read", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return dst, err
	}
	v, err := s.beginView(ctx)
	if err != nil {
		return dst, err
	}
	defer s.endView(v)
	var sb [300]byte
	err = v.c.EachSubject(ctx, object, relation, func(sub api.Subject) {
		b := append(append(append(sb[:0], sub.Type...), ':'), sub.ID...)
		if sub.Relation != "" {
			b = append(append(b, '#'), sub.Relation...)
		}
		dst = append(dst, string(b))
	})
	return dst, err
}

// AppendRoles appends the tenant roles subject holds directly in tenant
// to dst; see Store. With enough capacity in dst it does not allocate.
func (s *BoltStore) AppendRoles(ctx context.Context, dst []string, subject api.Subject, tenant string) (_ []string, err error) {
	defer s.guard("roles", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return dst, err
	}
	v, err := s.beginView(ctx)
	if err != nil {
		return dst, err
	}
	defer s.endView(v)
	return v.c.AppendRoles(dst, subject, tenant)
}
