package appapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

const (
	searchSubject  = checkapi.SearchSubject
	searchResource = checkapi.SearchResource
	searchAction   = checkapi.SearchAction
)

// handleSearch answers an AuthZEN search of kind. The candidates come
// from the relationship store (see candidates); each is confirmed by a
// check through the policy, in sorted order, so that pages are stable
// while the data is. A page holds at most page.limit results (MaxBatch
// when absent or larger) and confirms at most 4×MaxBatch candidates; a
// page that stops before the end has a non-empty next_token.
func (s *API) handleSearch(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
		if err != nil {
			s.PDP.CountError(pdp.IfaceAuthZEN, err)
			wire.WriteError(s.Log, w, err)
			return
		}
		q, err := checkapi.ReadAuthZENSearch(bytes.NewReader(body), kind)
		if err != nil {
			s.PDP.CountError(pdp.IfaceAuthZEN, err)
			wire.WriteError(s.Log, w, err)
			return
		}
		fp := fingerprint(q)
		offset := 0
		if q.PageToken != "" {
			if offset, err = readPageToken(q.PageToken, fp); err != nil {
				s.PDP.CountError(pdp.IfaceAuthZEN, err)
				wire.WriteError(s.Log, w, err)
				return
			}
		}
		ctx, cancel := s.PDP.Budget(r.Context())
		defer cancel()
		cands, err := s.candidates(ctx, q)
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		limit := q.PageLimit
		if limit <= 0 || limit > s.MaxBatch {
			limit = s.MaxBatch
		}
		results := []any{}
		i := min(offset, len(cands))
		for budget := 4 * s.MaxBatch; i < len(cands) && len(results) < limit && budget > 0; i, budget = i+1, budget-1 {
			c := q.Check
			switch kind {
			case searchSubject:
				c.Subject.ID = cands[i]
			case searchResource:
				c.Resource.ID = cands[i]
			case searchAction:
				c.Action = cands[i]
			}
			d, err := s.PDP.Check(ctx, pdp.IfaceAuthZEN, &c)
			if err != nil {
				wire.WriteError(s.Log, w, err)
				return
			}
			if !d.Allowed {
				continue
			}
			switch kind {
			case searchSubject:
				results = append(results, entity{Type: c.Subject.Type, ID: cands[i]})
			case searchResource:
				results = append(results, entity{Type: c.Resource.Type, ID: cands[i]})
			case searchAction:
				results = append(results, action{Name: cands[i]})
			}
		}
		page := checkapi.SearchPage{Count: len(results)}
		if i < len(cands) {
			page.NextToken = pageToken(i, fp)
		}
		wire.WriteJSON(w, http.StatusOK, checkapi.SearchResponse{Page: page, Results: results})
	}
}

type entity struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

type action struct {
	Name string `json:"name"`
}

// fingerprint names a search without its page token, so that a token is
// refused on a request other than the one it came from.
func fingerprint(q checkapi.Search) uint64 {
	h := sha256.New()
	h.Write([]byte(q.Kind))
	h.Write([]byte{0})
	h.Write(q.Check.Input())
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(q.PageLimit)))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// pageToken is an opaque next_token: where the next page starts in the
// sorted candidates, and the request's fingerprint.
func pageToken(offset int, fp uint64) string {
	b := binary.AppendUvarint(nil, uint64(offset))
	b = binary.BigEndian.AppendUint64(b, fp)
	return base64.RawURLEncoding.EncodeToString(b)
}

func readPageToken(tok string, fp uint64) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	var off uint64
	n := 0
	if err == nil {
		off, n = binary.Uvarint(b)
	}
	if err != nil || n <= 0 || len(b) != n+8 || off > 1<<31 {
		return 0, pdp.Errorf(pdp.ErrBadRequest, "page.token is not a token this server issued")
	}
	if binary.BigEndian.Uint64(b[n:]) != fp {
		return 0, pdp.Errorf(pdp.ErrBadRequest, "page.token belongs to another request: the entities, context and page.limit must stay those of the first page")
	}
	return int(off), nil
}

// candidates are the IDs (or action names) a search may return, sorted
// and distinct, before the policy confirms them:
//
//   - subjects: those the store says have the action (a permission or
//     relation of the resource's type) on the resource, and those holding
//     a tenant role that grants it in the resource's tenant (the stored
//     one, else the one the request names);
//   - resources: those of the type on which the store says the subject
//     has the action, and those in a tenant where the subject holds a
//     role that grants it (their own tenant or one they inherit,
//     tenantResources);
//   - actions: the permissions of the resource's type and the actions
//     tenant roles grant on it.
//
// A type the schema does not declare has no candidates: the answer is an
// empty result, not an error.
func (s *API) candidates(ctx context.Context, q checkapi.Search) ([]string, error) {
	sc, err := s.Store.Schema(ctx)
	if errors.Is(err, datastore.ErrNoSchema) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	types := sc.Types()
	c := q.Check
	if !slices.Contains(types, c.Resource.Type) || !slices.Contains(types, c.Subject.Type) {
		return nil, nil
	}
	var out []string
	switch q.Kind {
	case searchSubject:
		obj := api.Object{Type: c.Resource.Type, ID: c.Resource.ID}
		if isMember(sc, obj.Type, c.Action) {
			ids, err := s.Store.LookupSubjects(ctx, obj, c.Action, c.Subject.Type)
			if err != nil {
				return nil, err
			}
			out = append(out, ids...)
		}
		tenant := c.Resource.Tenant
		if stored := s.resourceTenant(ctx, sc, obj); stored != "" {
			tenant = stored
		}
		if tt := sc.TenantType(); tt != "" && tenant != "" {
			ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: tt, ObjectID: tenant, SubjectType: c.Subject.Type})
			if err != nil {
				return nil, err
			}
			for _, t := range ts {
				if t.Subject.Relation == "" && sc.Grants([]string{t.Relation}, obj.Type, c.Action) {
					out = append(out, t.Subject.ID)
				}
			}
		}
	case searchResource:
		subj := api.Subject{Type: c.Subject.Type, ID: c.Subject.ID}
		if isMember(sc, c.Resource.Type, c.Action) {
			ids, err := s.Store.LookupResources(ctx, subj, c.Action, c.Resource.Type)
			if err != nil {
				return nil, err
			}
			out = append(out, ids...)
		}
		if tt := sc.TenantType(); tt != "" {
			ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: tt, SubjectType: subj.Type, SubjectID: subj.ID})
			if err != nil {
				return nil, err
			}
			for _, t := range ts {
				if t.Subject.Relation != "" || !sc.Grants([]string{t.Relation}, c.Resource.Type, c.Action) {
					continue
				}
				if out, err = s.tenantResources(ctx, sc, t.Object.ID, c.Resource.Type, out); err != nil {
					return nil, err
				}
			}
		}
	case searchAction:
		out = actionNames(sc, c.Resource.Type)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// maxTenantDepth bounds tenantResources' walk down the tenancy
// relations, as the policy's walk up them is bounded.
const maxTenantDepth = 32

// tenantResources appends to out the IDs of the resources of type typ in
// tenant: those assigned to it, and those that inherit it through their
// type's tenancy relations (a file whose folder is in it, at any depth).
// It walks down from the objects assigned to the tenant, each object
// once; a resource below one that names a tenant of its own is a
// candidate too, which the policy's confirmation then denies.
func (s *API) tenantResources(ctx context.Context, sc *schema.Schema, tenant, typ string, out []string) ([]string, error) {
	tt := sc.TenantType()
	var level []api.Object
	for _, ot := range sc.Types() {
		if !sc.Tenanted(ot) {
			continue
		}
		ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: ot, Relation: "tenant", SubjectType: tt, SubjectID: tenant})
		if err != nil {
			return out, err
		}
		for _, t := range ts {
			if t.Subject.Relation == "" {
				level = append(level, t.Object)
			}
		}
	}
	// edges[X] are the types and relations through which a resource
	// inherits the tenant of an object of type X.
	edges := map[string][][2]string{}
	for _, ct := range sc.Types() {
		for _, rel := range sc.TenancyOf(ct).Inherit {
			for _, st := range sc.AllowedSubjects(ct, rel) {
				if st.Relation == "" {
					edges[st.Type] = append(edges[st.Type], [2]string{ct, rel})
				}
			}
		}
	}
	seen := map[api.Object]bool{}
	for depth := 0; len(level) > 0 && depth <= maxTenantDepth; depth++ {
		var next []api.Object
		for _, o := range level {
			if seen[o] {
				continue
			}
			seen[o] = true
			if o.Type == typ {
				out = append(out, o.ID)
			}
			for _, e := range edges[o.Type] {
				ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: e[0], Relation: e[1], SubjectType: o.Type, SubjectID: o.ID})
				if err != nil {
					return out, err
				}
				for _, t := range ts {
					if t.Subject.Relation == "" && !seen[t.Object] {
						next = append(next, t.Object)
					}
				}
			}
		}
		level = next
	}
	return out, nil
}

// isMember reports whether name is a relation or permission of typ.
func isMember(sc *schema.Schema, typ, name string) bool {
	return slices.Contains(sc.Permissions(typ), name) || slices.Contains(sc.Relations(typ), name)
}

// actionNames are the actions that make sense on typ: its permissions and
// the actions tenant roles grant on it ("typ:action" or "*:action"),
// sorted.
func actionNames(sc *schema.Schema, typ string) []string {
	out := slices.Clone(sc.Permissions(typ))
	for _, grants := range sc.RoleGrantsMap() {
		for _, g := range grants {
			t, a, _ := strings.Cut(g, ":")
			if (t == typ || t == "*") && a != "*" && a != "" {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
