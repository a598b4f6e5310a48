package datastore

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/nexuspdp/nexus/api"
	bolt "go.etcd.io/bbolt"
)

// LookupResources returns the IDs of the objects of resourceType on which
// subject has permission. It walks the subject-first index backwards from
// the subject to collect candidates, then checks each.
func (s *BoltStore) LookupResources(ctx context.Context, subject api.Subject, permission, resourceType string) (_ []string, err error) {
	defer s.guard("lookup", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	st := s.state.Load()
	if st.Graph == nil {
		return nil, ErrNoSchema
	}
	if !st.Graph.Declares(resourceType, permission) {
		return nil, fmt.Errorf("%w: %s#%s", ErrUnknown, resourceType, permission)
	}
	if err := subject.Validate(); err != nil {
		return nil, err
	}
	var cands []string
	err = s.viewState(func(tx *bolt.Tx, st *state) error {
		var err error
		cands, err = st.Resources(ctx, tx.Bucket(bSubj), subject, resourceType)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.filterChecks(ctx, cands, func(id string) CheckRequest {
		return CheckRequest{Object: api.Object{Type: resourceType, ID: id}, Permission: permission, Subject: subject}
	})
}

// LookupSubjects returns the IDs of subjects of subjectType (without a
// subject relation) that have permission on object. It walks the
// object-first index forwards to collect candidates, then checks each.
func (s *BoltStore) LookupSubjects(ctx context.Context, object api.Object, permission, subjectType string) (_ []string, err error) {
	defer s.guard("lookup", debug.SetPanicOnFault(true), &err)
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	st := s.state.Load()
	if st.Graph == nil {
		return nil, ErrNoSchema
	}
	if !st.Graph.Declares(object.Type, permission) || !st.Graph.Declares(subjectType, "") {
		return nil, fmt.Errorf("%w: %s#%s for %s", ErrUnknown, object.Type, permission, subjectType)
	}
	if err := object.Validate(); err != nil {
		return nil, err
	}
	var cands []string
	err = s.viewState(func(tx *bolt.Tx, st *state) error {
		var err error
		cands, err = st.Subjects(ctx, tx.Bucket(bObj), object, subjectType)
		return err
	})
	if err != nil {
		return nil, err
	}
	return s.filterChecks(ctx, cands, func(id string) CheckRequest {
		return CheckRequest{Object: object, Permission: permission, Subject: api.Subject{Type: subjectType, ID: id}}
	})
}

func (s *BoltStore) filterChecks(ctx context.Context, cands []string, req func(string) CheckRequest) ([]string, error) {
	slices.Sort(cands)
	cands = slices.Compact(cands)
	out := make([]string, 0, len(cands))
	for _, id := range cands {
		r, err := s.Check(ctx, req(id))
		if err != nil {
			return nil, err
		}
		if r.Allowed {
			out = append(out, id)
		}
	}
	return out, nil
}
