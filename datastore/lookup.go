package datastore

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/nexuspdp/nexus/api"
	bolt "go.etcd.io/bbolt"
)

// lookupLimit bounds how many objects a lookup visits.
const lookupLimit = 1_000_000

// LookupResources returns the IDs of the objects of resourceType on which
// subject has permission. It walks the subject-first index backwards from
// the subject to collect candidates, then checks each.
func (s *BoltStore) LookupResources(ctx context.Context, subject api.Subject, permission, resourceType string) (_ []string, err error) {
	defer s.guard("lookup", debug.SetPanicOnFault(true), &err)
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
	err = s.viewState(func(tx *bolt.Tx, st *state) error {
		stID, ok := st.dict.id(subject.Type)
		if !ok {
			return nil
		}
		rtID, _ := st.dict.id(resourceType)
		var err error
		cands, err = walk(ctx, tx.Bucket(bSubj).Cursor(), lookupNode{stID, subject.ID}, rtID, appendSubjPrefix,
			func(k []byte) (lookupNode, error) {
				ids, oid, _, err := decodeSubjKey(k)
				if err == nil && !api.ValidID(bstr(oid)) {
					err = errBadKey
				}
				return lookupNode{ids.ot, string(oid)}, err
			})
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
	err = s.viewState(func(tx *bolt.Tx, st *state) error {
		otID, _ := st.dict.id(object.Type)
		sID, _ := st.dict.id(subjectType)
		var err error
		cands, err = walk(ctx, tx.Bucket(bObj).Cursor(), lookupNode{otID, object.ID}, sID, appendObjPrefix,
			func(k []byte) (lookupNode, error) {
				ids, _, sid, err := decodeObjKey(k)
				if err == nil && !api.ValidID(bstr(sid)) {
					err = errBadKey
				}
				return lookupNode{ids.st, string(sid)}, err
			})
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

// lookupNode is an object or subject reached by a lookup walk.
type lookupNode struct {
	t  uint64
	id string
}

// walk visits, breadth first, every node reachable from start through one
// index (prefix builds a node's key prefix, next decodes the node a key
// leads to) and returns the IDs of those of type want, start included.
func walk(ctx context.Context, cur *bolt.Cursor, start lookupNode, want uint64,
	prefix func([]byte, uint64, string) []byte, next func([]byte) (lookupNode, error)) ([]string, error) {
	var cands []string
	if start.t == want {
		cands = append(cands, start.id)
	}
	seen := map[lookupNode]bool{start: true}
	queue := []lookupNode{start}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := queue[0]
		queue = queue[1:]
		p := prefix(nil, n.t, n.id)
		for k, v := cur.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = cur.Next() {
			mustEntry(k, v)
			o, err := next(k)
			if err != nil {
				return nil, err
			}
			if seen[o] {
				continue
			}
			if len(seen) >= lookupLimit {
				return nil, fmt.Errorf("datastore: lookup visits more than %d objects", lookupLimit)
			}
			seen[o] = true
			queue = append(queue, o)
			if o.t == want {
				cands = append(cands, o.id)
			}
		}
	}
	return cands, nil
}
