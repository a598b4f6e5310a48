package extauthz

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
)

// edgeCache keeps the last snapshot built, by ETag, so that every proxy
// worker polling an unchanged store costs one revision read.
type edgeCache struct {
	mu   sync.Mutex
	etag string
	body []byte
}

// edgeETag names the state a snapshot is built from: the policy
// generation (bumped on schema and policy loads) and the data revision.
func (s *Server) edgeETag(ctx context.Context) (string, error) {
	rev, err := s.cfg.Store.Revision(ctx)
	if err != nil {
		return "", err
	}
	return `"` + strconv.FormatUint(s.p.gen.Load(), 10) + "." + strconv.FormatUint(uint64(rev), 10) + `"`, nil
}

// handleEdgeSnapshot serves the RBAC snapshot the proxy-wasm edge filter
// decides from, with an ETag; If-None-Match answers 304.
func (s *Server) handleEdgeSnapshot(w http.ResponseWriter, r *http.Request) {
	etag, err := s.edgeETag(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		w.Header().Set("ETag", etag)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.edge.mu.Lock()
	defer s.edge.mu.Unlock()
	if s.edge.etag != etag {
		snap, err := buildEdgeSnapshot(r.Context(), s.cfg.Store)
		if err != nil {
			writeError(w, err)
			return
		}
		body, err := json.Marshal(snap)
		if err != nil {
			writeError(w, err)
			return
		}
		s.edge.etag, s.edge.body = etag, body
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", s.edge.etag)
	_, _ = w.Write(s.edge.body)
}

// buildEdgeSnapshot collects the schema's tenant roles and grants and every
// user's role assignments. A type whose relations accept users (directly
// or through a userset) is ReBAC: the edge may allow it on a role grant but
// leaves every other answer to the PDP. Other types that grants name are
// pure RBAC: the edge allows and denies them.
func buildEdgeSnapshot(ctx context.Context, store *datastore.BoltStore) (*api.EdgeSnapshot, error) {
	sc, err := store.Schema(ctx)
	if err != nil {
		return nil, err
	}
	rev, err := store.Revision(ctx)
	if err != nil {
		return nil, err
	}
	snap := &api.EdgeSnapshot{
		Version:       api.EdgeSnapshotVersion,
		Revision:      uint64(rev),
		GeneratedAt:   time.Now().UTC(),
		ResourceTypes: map[string]string{},
		Roles:         map[string][]string{},
		Assignments:   map[string]map[string][]string{},
	}
	for _, t := range sc.Types() {
		if t == sc.TenantType() || len(sc.Permissions(t)) == 0 {
			continue
		}
		mode := api.ModeRBAC
		for _, rel := range sc.Relations(t) {
			if slices.ContainsFunc(sc.AllowedSubjects(t, rel), func(st datastore.SubjectType) bool {
				return st.Type != sc.TenantType() && (len(sc.Permissions(st.Type)) == 0 || st.Relation != "")
			}) {
				mode = api.ModeReBAC
			}
		}
		snap.ResourceTypes[t] = mode
	}
	for role, grants := range sc.RoleGrantsMap() {
		var keep []string
		for _, g := range grants {
			typ, _, _ := strings.Cut(g, ":")
			if _, ok := snap.ResourceTypes[typ]; ok || typ == "*" {
				keep = append(keep, g)
			}
		}
		snap.Roles[role] = keep
	}
	tuples, err := store.Read(ctx, datastore.Filter{ObjectType: sc.TenantType()})
	if err != nil {
		return nil, err
	}
	for _, t := range tuples {
		if t.Subject.Relation != "" || t.Subject.Type != "user" {
			continue
		}
		if _, isRole := snap.Roles[t.Relation]; !isRole {
			continue
		}
		byTenant := snap.Assignments[t.Subject.ID]
		if byTenant == nil {
			byTenant = map[string][]string{}
			snap.Assignments[t.Subject.ID] = byTenant
		}
		byTenant[t.Object.ID] = append(byTenant[t.Object.ID], t.Relation)
	}
	if err := snap.Validate(); err != nil {
		return nil, fmt.Errorf("extauthz: edge snapshot: %w", err)
	}
	return snap, nil
}
