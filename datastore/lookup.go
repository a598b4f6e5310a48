package datastore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/nexuspdp/nexus/api"
	bolt "go.etcd.io/bbolt"
)

// DefaultLookupLimit bounds how many objects a lookup visits.
const DefaultLookupLimit = 1_000_000

// LookupResources returns the IDs of the objects of resourceType on which
// subject has permission. It walks the subject-first index backwards from
// the subject to collect candidates, then checks each.
func (s *BoltStore) LookupResources(ctx context.Context, subject api.Subject, permission, resourceType string) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	st := s.state.Load()
	if st.schema == nil {
		return nil, ErrNoSchema
	}
	td := st.schema.types[resourceType]
	if td == nil || td.members[permission] == nil {
		return nil, fmt.Errorf("%w: %s#%s", ErrUnknown, resourceType, permission)
	}
	if err := subject.Validate(); err != nil {
		return nil, err
	}
	var cands []string
	err := s.db.View(func(tx *bolt.Tx) error {
		type node struct {
			t  uint64
			id string
		}
		stID, ok := st.dict.id(subject.Type)
		if !ok {
			return nil
		}
		rtID, _ := st.dict.id(resourceType)
		seen := map[node]bool{{stID, subject.ID}: true}
		queue := []node{{stID, subject.ID}}
		if stID == rtID {
			cands = append(cands, subject.ID)
		}
		cur := tx.Bucket(bSubj).Cursor()
		for len(queue) > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := queue[0]
			queue = queue[1:]
			prefix := appendSubjPrefix(nil, n.t, n.id)
			for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
				ids, oid, _, err := decodeSubjKey(k)
				if err != nil {
					return err
				}
				o := node{ids.ot, string(oid)}
				if seen[o] {
					continue
				}
				if len(seen) >= DefaultLookupLimit {
					return fmt.Errorf("datastore: lookup visits more than %d objects", DefaultLookupLimit)
				}
				seen[o] = true
				queue = append(queue, o)
				if o.t == rtID {
					cands = append(cands, o.id)
				}
			}
		}
		return nil
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
func (s *BoltStore) LookupSubjects(ctx context.Context, object api.Object, permission, subjectType string) ([]string, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	st := s.state.Load()
	if st.schema == nil {
		return nil, ErrNoSchema
	}
	td := st.schema.types[object.Type]
	if td == nil || td.members[permission] == nil || st.schema.types[subjectType] == nil {
		return nil, fmt.Errorf("%w: %s#%s for %s", ErrUnknown, object.Type, permission, subjectType)
	}
	if err := object.Validate(); err != nil {
		return nil, err
	}
	var cands []string
	err := s.db.View(func(tx *bolt.Tx) error {
		type node struct {
			t  uint64
			id string
		}
		otID, _ := st.dict.id(object.Type)
		sID, _ := st.dict.id(subjectType)
		seen := map[node]bool{{otID, object.ID}: true}
		queue := []node{{otID, object.ID}}
		if otID == sID {
			cands = append(cands, object.ID)
		}
		cur := tx.Bucket(bObj).Cursor()
		for len(queue) > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := queue[0]
			queue = queue[1:]
			prefix := appendObjPrefix(nil, n.t, n.id)
			for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
				ids, _, sid, err := decodeObjKey(k)
				if err != nil {
					return err
				}
				o := node{ids.st, string(sid)}
				if seen[o] {
					continue
				}
				if len(seen) >= DefaultLookupLimit {
					return fmt.Errorf("datastore: lookup visits more than %d objects", DefaultLookupLimit)
				}
				seen[o] = true
				queue = append(queue, o)
				if o.t == sID {
					cands = append(cands, o.id)
				}
			}
		}
		return nil
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
