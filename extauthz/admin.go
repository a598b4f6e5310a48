package extauthz

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
)

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.Handle("POST /v1/relationships", s.auth(s.handleWriteRelationships))
	mux.Handle("GET /v1/relationships", s.auth(s.handleReadRelationships))
	mux.Handle("PUT /v1/schema", s.auth(s.handlePutSchema))
	mux.Handle("GET /v1/schema", s.auth(s.handleGetSchema))
	mux.Handle("PUT /v1/policy", s.auth(s.handlePutPolicy))
	mux.Handle("GET /v1/policy", s.auth(s.handleGetPolicy))
	mux.Handle("POST /v1/check", s.auth(s.handleDebugCheck))
	mux.Handle("GET /v1/edge/snapshot", s.auth(s.handleEdgeSnapshot))
	if s.cfg.Profiling {
		mux.Handle("GET /debug/pprof/", s.auth(pprof.Index))
		mux.Handle("GET /debug/pprof/cmdline", s.auth(pprof.Cmdline))
		mux.Handle("GET /debug/pprof/profile", s.auth(pprof.Profile))
		mux.Handle("GET /debug/pprof/symbol", s.auth(pprof.Symbol))
		mux.Handle("GET /debug/pprof/trace", s.auth(pprof.Trace))
	}
	return mux
}

// auth requires the admin bearer token when one is configured.
func (s *Server) auth(h http.HandlerFunc) http.Handler {
	if s.cfg.AdminToken == "" {
		return h
	}
	want := []byte("Bearer " + s.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nexus-admin"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid admin bearer token is required", "reason": "unauthorized"})
			return
		}
		h(w, r)
	})
}

type writeRelationshipsRequest struct {
	Touches []string `json:"touches"`
	Deletes []string `json:"deletes"`
}

func parseTuples(field string, ss []string) ([]api.Tuple, error) {
	out := make([]api.Tuple, len(ss))
	for i, s := range ss {
		t, err := api.ParseTuple(s)
		if err != nil {
			return nil, errorf(checkapi.ErrBadRequest, "%s[%d]: %v", field, i, err)
		}
		out[i] = t
	}
	return out, nil
}

// handleWriteRelationships applies touches and deletes atomically: all of
// them or, on any invalid tuple, none.
func (s *Server) handleWriteRelationships(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req writeRelationshipsRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, errorf(checkapi.ErrBadRequest, "malformed JSON: %v", err))
		return
	}
	touches, err := parseTuples("touches", req.Touches)
	if err != nil {
		writeError(w, err)
		return
	}
	deletes, err := parseTuples("deletes", req.Deletes)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(touches)+len(deletes) == 0 {
		writeError(w, errorf(checkapi.ErrBadRequest, "touches and deletes are both empty"))
		return
	}
	rev, err := s.cfg.Store.Write(r.Context(), datastore.WriteRequest{Touches: touches, Deletes: deletes})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": uint64(rev)})
}

func (s *Server) handleReadRelationships(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := datastore.Filter{
		ObjectType: q.Get("object_type"), ObjectID: q.Get("object_id"), Relation: q.Get("relation"),
		SubjectType: q.Get("subject_type"), SubjectID: q.Get("subject_id"), SubjectRelation: q.Get("subject_relation"),
		Limit: 1000,
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 || n > 100000 {
			writeError(w, errorf(checkapi.ErrBadRequest, "limit %q must be a number from 1 to 100000", l))
			return
		}
		f.Limit = n
	}
	ts, err := s.cfg.Store.Read(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	writeJSON(w, http.StatusOK, map[string]any{"tuples": out})
}

// handlePutSchema writes a schema (YAML) and reloads the policy so its
// roles and permissions follow. ?force=true deletes tuples it orphans.
func (s *Server) handlePutSchema(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	sc, err := datastore.ParseSchema(body)
	if err != nil {
		writeError(w, err)
		return
	}
	rev, err := s.cfg.Store.WriteSchema(r.Context(), sc, r.URL.Query().Get("force") == "true")
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.p.load(r.Context(), nil); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"revision": uint64(rev)})
}

func (s *Server) handleGetSchema(w http.ResponseWriter, r *http.Request) {
	sc, err := s.cfg.Store.Schema(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(sc.Source())
}

// handlePutPolicy swaps in a new bundle (.tar.gz) atomically; in-flight
// checks finish on the old one.
func (s *Server) handlePutPolicy(w http.ResponseWriter, r *http.Request) {
	b, err := bundle.Read(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.p.load(r.Context(), b); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, b.Manifest)
}

func (s *Server) handleGetPolicy(w http.ResponseWriter, _ *http.Request) {
	s.p.mu.Lock()
	m := s.p.base.Manifest
	s.p.mu.Unlock()
	writeJSON(w, http.StatusOK, m)
}

type debugCheckRequest struct {
	Object     string `json:"object"`
	Permission string `json:"permission"`
	Subject    string `json:"subject"`
	Trace      bool   `json:"trace"`
}

// handleDebugCheck asks the relationship store directly, with an optional
// trace that explains the answer.
func (s *Server) handleDebugCheck(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req debugCheckRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, errorf(checkapi.ErrBadRequest, "malformed JSON: %v", err))
		return
	}
	obj, err := api.ParseObject(req.Object)
	if err != nil {
		writeError(w, errorf(checkapi.ErrBadRequest, "object: %v", err))
		return
	}
	sub, err := api.ParseSubject(req.Subject)
	if err != nil {
		writeError(w, errorf(checkapi.ErrBadRequest, "subject: %v", err))
		return
	}
	res, err := s.cfg.Store.Check(r.Context(), datastore.CheckRequest{Object: obj, Permission: req.Permission, Subject: sub, Trace: req.Trace})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
