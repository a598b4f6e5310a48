package check

import (
	"bytes"
	"context"
	"fmt"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// lookupLimit bounds how many objects a lookup visits.
const lookupLimit = 1_000_000

// walkNode is an object or subject reached by a lookup walk.
type walkNode struct {
	Type uint64 // its type's number
	ID   string
}

// walk visits, breadth first, every walkNode reachable from start through one
// index (prefix builds a walkNode's key prefix, next decodes the walkNode a key
// leads to) and returns the IDs of those of type want, start included.
func walk(ctx context.Context, cur *bolt.Cursor, start walkNode, want uint64,
	prefix func([]byte, uint64, string) []byte, next func([]byte) (walkNode, error)) ([]string, error) {
	var cands []string
	if start.Type == want {
		cands = append(cands, start.ID)
	}
	seen := map[walkNode]bool{start: true}
	queue := []walkNode{start}
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := queue[0]
		queue = queue[1:]
		p := prefix(nil, n.Type, n.ID)
		for k, v := cur.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = cur.Next() {
			index.MustEntry(k, v)
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
			if o.Type == want {
				cands = append(cands, o.ID)
			}
		}
	}
	return cands, nil
}

// Resources returns the IDs of the objects of resourceType that subject
// may have a permission on: every object reachable from subject through
// the subject-first index (subj), to be checked one by one.
func (st *State) Resources(ctx context.Context, subj *bolt.Bucket, subject api.Subject, resourceType string) ([]string, error) {
	stID, ok := st.Dict.ID(subject.Type)
	if !ok {
		return nil, nil
	}
	rtID, _ := st.Dict.ID(resourceType)
	return walk(ctx, subj.Cursor(), walkNode{stID, subject.ID}, rtID, index.AppendSubjPrefix,
		func(k []byte) (walkNode, error) {
			ids, oid, _, err := index.DecodeSubjKey(k)
			if err == nil && !api.ValidID(index.Bstr(oid)) {
				err = index.ErrBadKey
			}
			return walkNode{ids.OT, string(oid)}, err
		})
}

// Subjects returns the IDs of the subjects of subjectType that may have a
// permission on object: every subject reachable from object through the
// object-first index (obj), to be checked one by one.
func (st *State) Subjects(ctx context.Context, obj *bolt.Bucket, object api.Object, subjectType string) ([]string, error) {
	otID, _ := st.Dict.ID(object.Type)
	sID, _ := st.Dict.ID(subjectType)
	return walk(ctx, obj.Cursor(), walkNode{otID, object.ID}, sID, index.AppendObjPrefix,
		func(k []byte) (walkNode, error) {
			ids, _, sid, err := index.DecodeObjKey(k)
			if err == nil && !api.ValidID(index.Bstr(sid)) {
				err = index.ErrBadKey
			}
			return walkNode{ids.ST, string(sid)}, err
		})
}

// Declares reports whether the schema declares typ, and perm on it when
// perm is not empty (a relation or a permission).
func (g *Graph) Declares(typ, perm string) bool {
	t := g.types[typ]
	return t != nil && (perm == "" || t.members[perm] != nil)
}
