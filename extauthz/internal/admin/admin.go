// Package admin is the admin API: relationships, schema, policy bundle,
// a debugging check against the store, the edge filter's RBAC snapshot,
// /metrics and, when enabled, Go's profiles. Everything but /metrics sits
// behind the admin bearer token.
package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// Writer takes the admin API's writes: the store itself on a single node,
// the cluster's log on a replica.
type Writer interface {
	// Write applies touches and deletes atomically and returns the
	// revision that holds them.
	Write(ctx context.Context, req datastore.WriteRequest) (datastore.Revision, error)
	// WriteSchema replaces the schema; force deletes the tuples it
	// orphans.
	WriteSchema(ctx context.Context, sc *schema.Schema, force bool) (datastore.Revision, error)
}

// PolicyWriter is a Writer that also takes policy loads (a cluster
// replica): the bundle goes to every replica, and the PDP loads it when
// its own replica applies it.
type PolicyWriter interface {
	LoadPolicy(ctx context.Context, bundle []byte) (datastore.Revision, error)
}

// PolicySaver keeps the policies PUT /v1/policy loads on a single node
// across restarts: Save writes bundle durably aside, calls load, and makes
// it the saved policy only when load succeeded.
type PolicySaver interface {
	Save(ctx context.Context, bundle []byte, revision string, load func() error) error
}

// API serves the admin endpoints.
type API struct {
	PDP   *pdp.PDP
	Store datastore.Store
	// Writer takes relationship and schema writes (and policy loads when
	// it is a PolicyWriter); nil means Store.
	Writer Writer
	// Saver, if set, keeps what PUT /v1/policy loads on a single node (a
	// cluster replica's policies go through the log instead).
	Saver PolicySaver
	// Token is the bearer token every endpoint but /metrics requires; ""
	// leaves them open.
	Token string
	// Profiling serves Go's profiles under /debug/pprof/.
	Profiling bool
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// MaxBodyBytes bounds request bodies other than policy bundles.
	MaxBodyBytes int64
	// BundleLimits bound a policy bundle's files once decompressed; an
	// upload over one is answered 413 naming it.
	BundleLimits bundle.Limits
	// Log receives the details of server-side failures.
	Log *slog.Logger

	edge edgeCache
	keys writeKeys
}

// Register adds the admin endpoints to mux.
func (s *API) Register(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{}))
	mux.Handle("POST /v1/relationships", s.auth(s.noParams(s.handleWriteRelationships)))
	mux.Handle("GET /v1/relationships", s.auth(s.handleReadRelationships))
	mux.Handle("PUT /v1/schema", s.auth(s.handlePutSchema))
	mux.Handle("GET /v1/schema", s.auth(s.noParams(s.handleGetSchema)))
	mux.Handle("PUT /v1/policy", s.auth(s.noParams(s.handlePutPolicy)))
	mux.Handle("GET /v1/policy", s.auth(s.noParams(s.handleGetPolicy)))
	mux.Handle("POST /v1/check", s.auth(s.noParams(s.handleDebugCheck)))
	mux.Handle("GET /v1/edge/snapshot", s.auth(s.noParams(s.handleEdgeSnapshot)))
	mux.Handle("GET /v1/revision", s.auth(s.noParams(s.handleRevision)))
	if s.Profiling {
		mux.Handle("GET /debug/pprof/", s.auth(pprof.Index))
		mux.Handle("GET /debug/pprof/cmdline", s.auth(pprof.Cmdline))
		mux.Handle("GET /debug/pprof/profile", s.auth(pprof.Profile))
		mux.Handle("GET /debug/pprof/symbol", s.auth(pprof.Symbol))
		mux.Handle("GET /debug/pprof/trace", s.auth(pprof.Trace))
	}
}

// auth requires the admin bearer token when one is configured, then
// refuses a path or query that is not valid UTF-8 (wire.CheckURL).
func (s *API) auth(h http.HandlerFunc) http.Handler {
	h = s.validURL(h)
	if s.Token == "" {
		return h
	}
	want := []byte(s.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The scheme in any case (RFC 7235: auth-scheme is
		// case-insensitive), then the token exactly.
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimLeft(got, " ")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="nexus-admin"`)
			wire.WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid admin bearer token is required", "reason": "unauthorized"})
			return
		}
		h(w, r)
	})
}

// validURL refuses a request whose path or query is not valid UTF-8.
func (s *API) validURL(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := wire.CheckURL(r); err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		h(w, r)
	}
}

type writeRelationshipsRequest struct {
	Touches       []string          `json:"touches"`
	Deletes       []string          `json:"deletes"`
	Preconditions []preconditionDoc `json:"preconditions"`
}

// preconditionDoc is one precondition of a write: op "must_exist" or
// "must_not_exist", on one tuple or on a filter (the fields of GET
// /v1/relationships' query). A tuple is the filter of all its fields (a
// subject without a relation matches that subject's usersets too).
type preconditionDoc struct {
	Op     string     `json:"op"`
	Tuple  string     `json:"tuple"`
	Filter *filterDoc `json:"filter"`
}

type filterDoc struct {
	ObjectType      string `json:"object_type"`
	ObjectID        string `json:"object_id"`
	Relation        string `json:"relation"`
	SubjectType     string `json:"subject_type"`
	SubjectID       string `json:"subject_id"`
	SubjectRelation string `json:"subject_relation"`
}

func parsePreconditions(docs []preconditionDoc) ([]datastore.Precondition, error) {
	out := make([]datastore.Precondition, 0, len(docs))
	for i, d := range docs {
		var p datastore.Precondition
		switch d.Op {
		case "must_exist":
			p.MustExist = true
		case "must_not_exist":
		default:
			return nil, pdp.Errorf(pdp.ErrBadRequest, "preconditions[%d].op %q: want must_exist or must_not_exist", i, d.Op)
		}
		switch {
		case (d.Tuple == "") == (d.Filter == nil):
			return nil, pdp.Errorf(pdp.ErrBadRequest, "preconditions[%d]: give a tuple or a filter, one of them", i)
		case d.Tuple != "":
			t, err := api.ParseTuple(d.Tuple)
			if err != nil {
				return nil, pdp.Errorf(pdp.ErrBadRequest, "preconditions[%d].tuple: %v", i, err)
			}
			p.Filter = datastore.Filter{ObjectType: t.Object.Type, ObjectID: t.Object.ID, Relation: t.Relation,
				SubjectType: t.Subject.Type, SubjectID: t.Subject.ID, SubjectRelation: t.Subject.Relation}
		default:
			f := d.Filter
			if f.ObjectType == "" && f.SubjectType == "" {
				return nil, pdp.Errorf(pdp.ErrBadRequest, "preconditions[%d].filter: name object_type or subject_type", i)
			}
			for _, dep := range [][3]string{{f.ObjectID, f.ObjectType, "object_id needs object_type"}, {f.SubjectID, f.SubjectType, "subject_id needs subject_type"}, {f.SubjectRelation, f.SubjectID, "subject_relation needs subject_id"}} {
				if dep[0] != "" && dep[1] == "" {
					return nil, pdp.Errorf(pdp.ErrBadRequest, "preconditions[%d].filter: %s", i, dep[2])
				}
			}
			p.Filter = datastore.Filter{ObjectType: f.ObjectType, ObjectID: f.ObjectID, Relation: f.Relation,
				SubjectType: f.SubjectType, SubjectID: f.SubjectID, SubjectRelation: f.SubjectRelation}
		}
		out = append(out, p)
	}
	return out, nil
}

func parseTuples(field string, ss []string) ([]api.Tuple, error) {
	out := make([]api.Tuple, len(ss))
	for i, s := range ss {
		t, err := api.ParseTuple(s)
		if err != nil {
			return nil, pdp.Errorf(pdp.ErrBadRequest, "%s[%d]: %v", field, i, err)
		}
		out[i] = t
	}
	return out, nil
}

// handleWriteRelationships applies touches and deletes atomically, if
// every precondition holds: all of them or, on any invalid tuple or failed
// precondition, none. The answer says the write's outcome: "written" (200,
// with its revision), "not_written" (4xx, 503: it never applies) or
// "unknown" (504: a retry with the same Idempotency-Key learns which,
// without applying it twice).
func (s *API) handleWriteRelationships(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if _, given := r.Header["Idempotency-Key"]; given {
		if err := api.ValidWriteID(key); err != nil {
			wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "Idempotency-Key: %v", err))
			return
		}
	}
	body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	var req writeRelationshipsRequest
	if err := decodeStrict(body, &req, "touches", "deletes", "preconditions"); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	touches, err := parseTuples("touches", req.Touches)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	deletes, err := parseTuples("deletes", req.Deletes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	pre, err := parsePreconditions(req.Preconditions)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	if len(touches)+len(deletes) == 0 {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "touches and deletes are both empty"))
		return
	}
	id, ctx := key, api.WithWriteID(r.Context(), key)
	if id == "" {
		id = newWriteID()
		ctx = api.WithNewWriteID(r.Context(), id)
	}
	write := func() (datastore.Revision, error) {
		return s.writer().Write(ctx, datastore.WriteRequest{Touches: touches, Deletes: deletes, Preconditions: pre})
	}
	var rev datastore.Revision
	if _, replicated := s.writer().(interface{ RemembersWriteIDs() }); key != "" && !replicated {
		rev, err = s.keys.do(key, write)
	} else {
		rev, err = write()
	}
	if err != nil {
		writeOutcome(s.Log, w, id, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"outcome": "written", "revision": uint64(rev), "write_id": id})
}

// writeOutcome answers a write that was not written, or whose outcome is
// unknown, with the write's ID.
func writeOutcome(log *slog.Logger, w http.ResponseWriter, id string, err error) {
	code, status, _ := wire.Status(err)
	if status >= 500 && log != nil {
		log.Error("write failed", "reason", code, "write_id", id, "err", err)
	}
	outcome := "not_written"
	switch code {
	case pdp.CodeOutcomeUnknown, pdp.CodeDeadline, pdp.CodeCanceled, pdp.CodeInternal:
		outcome = "unknown"
	}
	wire.WriteJSON(w, status, map[string]any{"outcome": outcome, "write_id": id, "error": wire.Describe(err), "reason": code})
}

func newWriteID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "w-" + hex.EncodeToString(b[:])
}

// writeKeys remembers the outcomes of the writes made with an
// Idempotency-Key on a single node (a cluster keeps them in its log): a
// retry gets the first outcome. At most maxKeys, for keyTTL.
type writeKeys struct {
	mu       sync.Mutex
	m        map[string]keyOutcome
	fifo     []string
	inflight map[string]chan struct{} // keys whose first write is under way
}

type keyOutcome struct {
	rev datastore.Revision
	err error
	at  time.Time
}

const (
	maxKeys = 10000
	keyTTL  = 10 * time.Minute
)

// do runs write once per key: a write with a key seen within keyTTL gets
// the first outcome, and one whose key is being written waits for it.
// Writes with different keys run side by side.
func (k *writeKeys) do(key string, write func() (datastore.Revision, error)) (datastore.Revision, error) {
	for {
		k.mu.Lock()
		if o, ok := k.m[key]; ok && time.Since(o.at) < keyTTL {
			k.mu.Unlock()
			return o.rev, o.err
		}
		busy, ok := k.inflight[key]
		if !ok {
			break // k.mu held
		}
		k.mu.Unlock()
		<-busy
	}
	if k.m == nil {
		k.m, k.inflight = map[string]keyOutcome{}, map[string]chan struct{}{}
	}
	done := make(chan struct{})
	k.inflight[key] = done
	k.mu.Unlock()

	rev, err := write()

	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.inflight, key)
	close(done)
	if err == nil || errors.Is(err, datastore.ErrPreconditionFailed) || errors.Is(err, datastore.ErrInvalidTuple) || errors.Is(err, datastore.ErrNoSchema) {
		// Outcomes that stand: a failure of the store may be retried.
		for len(k.fifo) >= maxKeys || len(k.fifo) > 0 && time.Since(k.m[k.fifo[0]].at) >= keyTTL {
			delete(k.m, k.fifo[0])
			k.fifo = k.fifo[1:]
		}
		if _, ok := k.m[key]; !ok {
			k.fifo = append(k.fifo, key)
		}
		k.m[key] = keyOutcome{rev: rev, err: err, at: time.Now()}
	}
	return rev, err
}

// readParams are the query parameters GET /v1/relationships accepts.
var readParams = []string{"object_type", "object_id", "relation", "subject_type", "subject_id", "subject_relation", "limit"}

func (s *API) handleReadRelationships(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := knownParams(q, readParams); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	f := datastore.Filter{
		ObjectType: q.Get("object_type"), ObjectID: q.Get("object_id"), Relation: q.Get("relation"),
		SubjectType: q.Get("subject_type"), SubjectID: q.Get("subject_id"), SubjectRelation: q.Get("subject_relation"),
		Limit: 1000,
	}
	// A narrower field without the one it narrows would match nothing
	// or everything, depending on the index: name the missing one.
	for _, dep := range [][2]string{{"object_id", "object_type"}, {"subject_id", "subject_type"}, {"subject_relation", "subject_id"}} {
		if q.Get(dep[0]) != "" && q.Get(dep[1]) == "" {
			wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "query parameter %s needs %s", dep[0], dep[1]))
			return
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 || n > 100000 {
			wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "query parameter limit %q must be a number from 1 to 100000", l))
			return
		}
		f.Limit = n
	}
	ts, err := s.Store.Read(r.Context(), f)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"tuples": out})
}

// noParams refuses a request with any query parameter, naming it: an
// endpoint that takes none must not let a misspelt one pass unnoticed.
func (s *API) noParams(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query(); len(q) > 0 {
			k := slices.Sorted(maps.Keys(q))[0]
			wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "unknown query parameter %q (this endpoint takes none)", k))
			return
		}
		h(w, r)
	}
}

// knownParams refuses a query parameter outside known, or one given twice,
// naming it.
func knownParams(q url.Values, known []string) error {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(known, k) {
			return pdp.Errorf(pdp.ErrBadRequest, "unknown query parameter %q (accepted: %s)", k, strings.Join(known, ", "))
		}
		if len(q[k]) > 1 {
			return pdp.Errorf(pdp.ErrBadRequest, "query parameter %q given %d times", k, len(q[k]))
		}
	}
	return nil
}

// boolParam reads an optional true/false query parameter.
func boolParam(q url.Values, name string) (bool, error) {
	switch v := q.Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, pdp.Errorf(pdp.ErrBadRequest, "query parameter %s %q must be true or false", name, v)
	}
}

// handlePutSchema writes a schema (YAML) and reloads the policy so its
// roles and permissions follow. ?force=true deletes tuples it orphans.
func (s *API) handlePutSchema(w http.ResponseWriter, r *http.Request) {
	body, err := wire.ReadBody(w, r, s.MaxBodyBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	sc, err := schema.Parse(body)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	q := r.URL.Query()
	if err := knownParams(q, []string{"force"}); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	force, err := boolParam(q, "force")
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	rev, err := s.writer().WriteSchema(r.Context(), sc, force)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	if err := s.PDP.Load(r.Context(), nil); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"revision": uint64(rev)})
}

func (s *API) handleGetSchema(w http.ResponseWriter, r *http.Request) {
	sc, err := s.Store.Schema(r.Context())
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(sc.Source())
}

// handlePutPolicy swaps in a new bundle (.tar.gz) atomically; in-flight
// checks finish on the old one.
//
// Through a PolicyWriter (a cluster replica) the bundle is checked here
// (it reads, and it has the configured entrypoints), then written to the
// log; the answer comes once this replica loaded it, with the log's
// revision as "cluster_revision".
func (s *API) handlePutPolicy(w http.ResponseWriter, r *http.Request) {
	pw, clustered := s.writer().(PolicyWriter)
	if !clustered && s.Saver == nil {
		b, err := bundle.ReadLimited(http.MaxBytesReader(w, r.Body, maxBundleBytes), s.BundleLimits)
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		if err := s.PDP.Load(r.Context(), b); err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		wire.WriteJSON(w, http.StatusOK, b.Manifest)
		return
	}
	raw, err := wire.ReadBody(w, r, maxBundleBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	b, err := bundle.ReadLimited(bytes.NewReader(raw), s.BundleLimits)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	if !clustered {
		loaded := false
		err := s.Saver.Save(r.Context(), raw, b.Manifest.Revision, func() error {
			if err := s.PDP.Load(r.Context(), b); err != nil {
				return err
			}
			loaded = true
			return nil
		})
		if err != nil {
			if loaded {
				s.Log.Error("the policy loaded through the admin API was not saved", "policy_revision", b.Manifest.Revision, "err", err)
				wire.WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": "the policy is in force but was not saved: a restart would not keep it", "reason": pdp.CodeInternal})
				return
			}
			wire.WriteError(s.Log, w, err)
			return
		}
		s.Log.Info("loaded and saved the policy from the admin API; it is kept across restarts unless --policy or a bundle service replaces it", "policy_revision", b.Manifest.Revision)
		wire.WriteJSON(w, http.StatusOK, b.Manifest)
		return
	}
	if err := s.PDP.CheckBundle(b); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	rev, err := pw.LoadPolicy(r.Context(), raw)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	out, err := withClusterRevision(b.Manifest, rev)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

// maxBundleBytes bounds a policy bundle.
const maxBundleBytes = 64 << 20

// withClusterRevision is the manifest as its JSON object with the log's
// revision added as "cluster_revision" (the manifest's own "revision" is
// the policy's).
func withClusterRevision(m bundle.Manifest, rev datastore.Revision) (map[string]json.RawMessage, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	out["cluster_revision"] = json.RawMessage(strconv.FormatUint(uint64(rev), 10))
	return out, nil
}

func (s *API) writer() Writer {
	if s.Writer != nil {
		return s.Writer
	}
	return s.Store
}

// handleRevision answers the data's current revision, a consistency token
// for checks: {"revision": N}.
func (s *API) handleRevision(w http.ResponseWriter, r *http.Request) {
	rev, err := s.Store.Revision(r.Context())
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"revision": uint64(rev)})
}

func (s *API) handleGetPolicy(w http.ResponseWriter, _ *http.Request) {
	wire.WriteJSON(w, http.StatusOK, s.PDP.Manifest())
}

// debugCheckRequest is the body of POST /v1/check. OpenFGA users name
// the permission "relation": either field is accepted.
type debugCheckRequest struct {
	Object     string `json:"object"`
	Permission string `json:"permission"`
	Relation   string `json:"relation"`
	Subject    string `json:"subject"`
	Trace      bool   `json:"trace"`
}

// decodeStrict decodes one JSON object of body (read by wire.ReadJSON)
// into v, refusing a field outside fields by name, and anything after the
// object.
func decodeStrict(body []byte, v any, fields ...string) error {
	if err := wire.DecodeJSON(body, v, true, ""); err != nil {
		if strings.Contains(err.Error(), "unknown field ") {
			return fmt.Errorf("%w (accepted: %s)", err, strings.Join(fields, ", "))
		}
		return err
	}
	return nil
}

// handleDebugCheck asks the relationship store directly, with an optional
// trace that explains the answer: {"allowed": bool, "trace": {...}}.
func (s *API) handleDebugCheck(w http.ResponseWriter, r *http.Request) {
	body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	var req debugCheckRequest
	if err := decodeStrict(body, &req, "object", "permission", "relation", "subject", "trace"); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	switch {
	case req.Permission == "":
		req.Permission = req.Relation
	case req.Relation != "" && req.Relation != req.Permission:
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "permission %q and relation %q differ: send one of them", req.Permission, req.Relation))
		return
	}
	if req.Permission == "" {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "permission (or relation) is required"))
		return
	}
	obj, err := api.ParseObject(req.Object)
	if err != nil {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "object: %v", err))
		return
	}
	sub, err := api.ParseSubject(req.Subject)
	if err != nil {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "subject: %v", err))
		return
	}
	res, err := s.Store.Check(r.Context(), datastore.CheckRequest{Object: obj, Permission: req.Permission, Subject: sub, Trace: req.Trace})
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}

// edgeCache keeps the last snapshot built, by ETag, so that every proxy
// worker polling an unchanged store costs one revision read.
type edgeCache struct {
	mu   sync.Mutex
	etag string
	body []byte
}

// edgeETag names the state a snapshot is built from: the policy
// generation (bumped on schema and policy loads) and the data revision.
func (s *API) edgeETag(ctx context.Context) (string, error) {
	rev, err := s.Store.Revision(ctx)
	if err != nil {
		return "", err
	}
	return `"` + strconv.FormatUint(s.PDP.Generation(), 10) + "." + strconv.FormatUint(uint64(rev), 10) + `"`, nil
}

// handleEdgeSnapshot serves the RBAC snapshot the proxy-wasm edge filter
// decides from, with an ETag; If-None-Match answers 304.
func (s *API) handleEdgeSnapshot(w http.ResponseWriter, r *http.Request) {
	etag, err := s.edgeETag(r.Context())
	if err != nil {
		wire.WriteError(s.Log, w, err)
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
		snap, err := buildEdgeSnapshot(r.Context(), s.Store)
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		body, err := json.Marshal(snap)
		if err != nil {
			wire.WriteError(s.Log, w, err)
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
func buildEdgeSnapshot(ctx context.Context, store datastore.Store) (*api.EdgeSnapshot, error) {
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
		// The edge reads a request's tenant from the request itself. For
		// a type whose resources the store assigns to tenants, the
		// store's tenant may differ from the claimed one, and only the
		// PDP can tell: such a type is left out, so the edge passes it on.
		// So is a type whose resources inherit a tenant or must have one.
		if slices.ContainsFunc(sc.AllowedSubjects(t, "tenant"), func(st schema.SubjectType) bool { return st.Type == sc.TenantType() }) {
			continue
		}
		if tn := sc.Tenancy(t); tn.Required || len(tn.Inherit) > 0 {
			continue
		}
		mode := api.ModeRBAC
		for _, rel := range sc.Relations(t) {
			if slices.ContainsFunc(sc.AllowedSubjects(t, rel), func(st schema.SubjectType) bool {
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
		return nil, fmt.Errorf("admin: edge snapshot: %w", err)
	}
	return snap, nil
}
