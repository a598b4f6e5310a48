package edge

import (
	"strconv"
	"unsafe"

	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

// Header names the filter sets or reads.
const (
	// DecisionHeader marks a request the edge allowed ("edge-allow") and a
	// local reply it denied ("edge-deny"). A client-sent value is removed.
	DecisionHeader = "x-nexus-decision"
	// ReasonHeader carries the reason code of an edge deny.
	ReasonHeader = "x-nexus-reason"
)

// Stats counts what a root context did. The same counts are exported as
// proxy counters (metricNames), added on every tick and snapshot reply.
type Stats struct {
	Allowed, Denied, Passed uint64 // request decisions
	SnapshotUpdates         uint64 // new snapshots swapped in (200)
	SnapshotNotModified     uint64 // 304 replies that refreshed the current snapshot
	SnapshotRejected        uint64 // replies with an invalid snapshot, kept the last good one
	FetchFailures           uint64 // failed calls, timeouts and unexpected statuses
	StaleReplies            uint64 // replies to a call the filter no longer waits for
	CallsDispatched         uint64 // snapshot requests sent
}

const (
	mAllowed = iota
	mDenied
	mPassed
	mUpdates
	mNotModified
	mRejected
	mFetchFailures
	mStaleReplies
	mCalls
	numMetrics
)

var metricNames = [numMetrics]string{
	"nexus_edge_allowed_total",
	"nexus_edge_denied_total",
	"nexus_edge_passed_total",
	"nexus_edge_snapshot_updates_total",
	"nexus_edge_snapshot_not_modified_total",
	"nexus_edge_snapshot_rejected_total",
	"nexus_edge_snapshot_fetch_failures_total",
	"nexus_edge_snapshot_stale_replies_total",
	"nexus_edge_snapshot_calls_total",
}

// rootCtx is one plugin instance (root context) with its config and snapshot.
type rootCtx struct {
	cfg    *Config
	routes []compiledRoute

	snap        *Snapshot
	etag        string
	confirmedAt int64 // host ns of the last 200/304 for snap

	inflight     bool
	token        uint32
	dispatchedAt int64
	metricIDs    [numMetrics]uint32
	pending      [numMetrics]int64 // counts not yet added to the proxy's metrics
	metricsOK    bool
	stats        Stats
}

type compiledRoute struct {
	Route
	pat pattern
}

// Filter is the edge filter: a proxywasm.Handler over a proxywasm.Host.
type Filter struct {
	host    proxywasm.Host
	roots   map[uint32]*rootCtx
	streams map[uint32]uint32 // stream context -> root context
}

var _ proxywasm.Handler = (*Filter)(nil)

// NewFilter returns a Filter that talks to the proxy through host.
func NewFilter(host proxywasm.Host) *Filter {
	return &Filter{host: host, roots: map[uint32]*rootCtx{}, streams: map[uint32]uint32{}}
}

// Stats returns the counts of root context id.
func (f *Filter) Stats(rootID uint32) Stats {
	if r := f.roots[rootID]; r != nil {
		return r.stats
	}
	return Stats{}
}

// SnapshotRevision returns the revision of root context id's snapshot and
// whether it has one.
func (f *Filter) SnapshotRevision(rootID uint32) (uint64, bool) {
	if r := f.roots[rootID]; r != nil && r.snap != nil {
		return r.snap.Revision, true
	}
	return 0, false
}

// OnVMStart implements proxywasm.Handler.
func (f *Filter) OnVMStart(int) bool { return true }

// OnContextCreate implements proxywasm.Handler.
func (f *Filter) OnContextCreate(id, parentID uint32) {
	if parentID == 0 {
		f.roots[id] = &rootCtx{}
		return
	}
	f.streams[id] = parentID
}

// OnConfigure implements proxywasm.Handler: parse the config, define metrics,
// start ticking. A bad config is logged and fails the plugin start.
func (f *Filter) OnConfigure(rootID uint32, size int) bool {
	r := f.roots[rootID]
	if r == nil {
		r = &rootCtx{}
		f.roots[rootID] = r
	}
	raw, err := f.host.PluginConfiguration(size)
	if err != nil {
		f.host.Log(proxywasm.LogError, "nexus edge: reading plugin configuration: "+err.Error())
		return false
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		f.host.Log(proxywasm.LogError, "nexus edge: "+err.Error())
		return false
	}
	routes := make([]compiledRoute, len(cfg.Routes))
	for i, rt := range cfg.Routes {
		p, _ := compilePattern(rt.Path) // Validate compiled it once already
		routes[i] = compiledRoute{Route: rt, pat: p}
	}
	if old := r.cfg; old == nil || old.PDPCluster != cfg.PDPCluster || old.SnapshotPath != cfg.SnapshotPath || old.Authority != cfg.Authority {
		r.snap, r.etag, r.confirmedAt, r.inflight = nil, "", 0, false
	}
	r.cfg, r.routes = cfg, routes
	if !r.metricsOK {
		r.metricsOK = true
		for i, name := range metricNames {
			id, err := f.host.DefineCounter(name)
			if err != nil {
				f.host.Log(proxywasm.LogWarn, "nexus edge: defining metric "+name+": "+err.Error())
				r.metricsOK = false
				break
			}
			r.metricIDs[i] = id
		}
	}
	if err := f.host.SetTickPeriod(cfg.RefreshPeriodMS); err != nil {
		f.host.Log(proxywasm.LogError, "nexus edge: setting tick period: "+err.Error())
		return false
	}
	f.host.Log(proxywasm.LogInfo, "nexus edge: configured: "+strconv.Itoa(len(routes))+" routes, snapshot "+cfg.PDPCluster+cfg.SnapshotPath)
	return true
}

func (f *Filter) count(r *rootCtx, m int) {
	st := &r.stats
	switch m {
	case mAllowed:
		st.Allowed++
	case mDenied:
		st.Denied++
	case mPassed:
		st.Passed++
	case mUpdates:
		st.SnapshotUpdates++
	case mNotModified:
		st.SnapshotNotModified++
	case mRejected:
		st.SnapshotRejected++
	case mFetchFailures:
		st.FetchFailures++
	case mStaleReplies:
		st.StaleReplies++
	case mCalls:
		st.CallsDispatched++
	}
	r.pending[m]++
}

// flush adds the pending counts to the proxy's metrics. Requests only count in
// memory (a host call per request would cost more than the decision); the
// counts reach the proxy on the next tick or snapshot reply.
func (f *Filter) flush(r *rootCtx) {
	for m, n := range r.pending {
		if n == 0 {
			continue
		}
		r.pending[m] = 0
		if r.metricsOK {
			_ = f.host.IncrementCounter(r.metricIDs[m], n)
		}
	}
}

// OnTick implements proxywasm.Handler: poll the snapshot unless a poll is
// still in flight (a poll older than twice its timeout is given up).
func (f *Filter) OnTick(rootID uint32) {
	r := f.roots[rootID]
	if r == nil || r.cfg == nil {
		return
	}
	defer f.flush(r)
	now := f.host.Now()
	if r.inflight {
		if now-r.dispatchedAt < 2*int64(r.cfg.CallTimeoutMS)*1e6 {
			return
		}
		r.inflight = false
		f.count(r, mFetchFailures)
	}
	headers := [][2]string{
		{":method", "GET"},
		{":path", r.cfg.SnapshotPath},
		{":authority", r.cfg.Authority},
		{"accept", "application/json"},
	}
	if r.etag != "" && r.snap != nil {
		headers = append(headers, [2]string{"if-none-match", r.etag})
	}
	if r.cfg.Token != "" {
		headers = append(headers, [2]string{"authorization", "Bearer " + r.cfg.Token})
	}
	token, err := f.host.HTTPCall(r.cfg.PDPCluster, headers, nil, r.cfg.CallTimeoutMS)
	if err != nil {
		f.count(r, mFetchFailures)
		f.host.Log(proxywasm.LogWarn, "nexus edge: snapshot request: "+err.Error())
		return
	}
	r.inflight, r.token, r.dispatchedAt = true, token, now
	f.count(r, mCalls)
}

// OnHTTPCallResponse implements proxywasm.Handler: swap in a valid new
// snapshot, refresh the current one on 304, count everything else.
func (f *Filter) OnHTTPCallResponse(rootID, token uint32, numHeaders, bodySize, _ int) {
	r := f.roots[rootID]
	if r == nil || r.cfg == nil || !r.inflight || token != r.token {
		if r != nil {
			f.count(r, mStaleReplies)
			f.flush(r)
		}
		return
	}
	defer f.flush(r)
	r.inflight = false
	if numHeaders == 0 {
		f.count(r, mFetchFailures)
		f.host.Log(proxywasm.LogWarn, "nexus edge: snapshot request failed (no reply)")
		return
	}
	hs, err := f.host.HTTPCallResponseHeaders()
	if err != nil {
		f.count(r, mFetchFailures)
		f.host.Log(proxywasm.LogWarn, "nexus edge: snapshot reply headers: "+err.Error())
		return
	}
	status, _ := hs.Get(":status")
	etag, _ := hs.Get("etag")
	now := f.host.Now()
	switch status {
	case "304":
		if r.snap == nil || (etag != "" && etag != r.etag) {
			f.count(r, mFetchFailures)
			f.host.Log(proxywasm.LogWarn, "nexus edge: 304 for a snapshot the filter does not hold")
			return
		}
		r.confirmedAt = now
		f.count(r, mNotModified)
	case "200":
		if bodySize > r.cfg.MaxSnapshotBytes {
			f.count(r, mRejected)
			f.host.Log(proxywasm.LogWarn, "nexus edge: snapshot of "+strconv.Itoa(bodySize)+" bytes exceeds max_snapshot_bytes; keeping the last good one")
			return
		}
		body, err := f.host.HTTPCallResponseBody(bodySize)
		if err != nil {
			f.count(r, mFetchFailures)
			f.host.Log(proxywasm.LogWarn, "nexus edge: snapshot reply body: "+err.Error())
			return
		}
		snap, err := DecodeSnapshot(body)
		if err != nil {
			f.count(r, mRejected)
			f.host.Log(proxywasm.LogWarn, "nexus edge: "+err.Error()+"; keeping the last good one")
			return
		}
		r.snap, r.etag, r.confirmedAt = snap, etag, now
		f.count(r, mUpdates)
		f.host.Log(proxywasm.LogInfo, "nexus edge: snapshot revision "+strconv.FormatUint(snap.Revision, 10)+" loaded")
	default:
		f.count(r, mFetchFailures)
		f.host.Log(proxywasm.LogWarn, "nexus edge: snapshot reply status "+status)
	}
}

// request is what the filter reads from a request's headers. Its strings
// alias the header map the host handed over (no copies on the hot path): they
// are used by decide and dropped before the next host call that could reuse
// that memory.
type request struct {
	method, path, subject, tenant, jwt string
	spoofed                            bool // carries DecisionHeader
}

func (f *Filter) readRequest(cfg *Config) (request, bool) {
	hs, err := f.host.RequestHeaders()
	if err != nil {
		return request{}, false
	}
	var q request
	hs.Each(func(k, v []byte) bool {
		switch string(k) {
		case ":method":
			q.method = alias(v)
		case ":path":
			q.path = alias(v)
		case DecisionHeader:
			q.spoofed = true
		default:
			// A header may serve as more than one source.
			if cfg.Subject.Header != "" && string(k) == cfg.Subject.Header && q.subject == "" {
				q.subject = alias(v)
			}
			if cfg.Subject.JWTHeader != "" && string(k) == cfg.Subject.JWTHeader && q.jwt == "" {
				q.jwt = alias(v)
			}
			if cfg.Tenant.Header != "" && string(k) == cfg.Tenant.Header && q.tenant == "" {
				q.tenant = alias(v)
			}
		}
		return true
	})
	return q, true
}

// decide applies the route rules and the snapshot to a request.
func (r *rootCtx) decide(q *request, now int64) (Outcome, string) {
	path, ok := cleanPath(q.path)
	if !ok {
		return Pass, ReasonBadPath
	}
	var route *compiledRoute
	tenant := ""
	for i := range r.routes {
		rt := &r.routes[i]
		if rt.Method != "*" && rt.Method != q.method {
			continue
		}
		if t, ok := rt.pat.match(path); ok {
			route, tenant = rt, t
			break
		}
	}
	if route == nil {
		return Pass, ReasonNoRoute
	}
	noSnap := Pass
	if r.cfg.OnNoSnapshot == OnNoSnapshotDeny {
		noSnap = Deny
	}
	if r.snap == nil {
		return noSnap, ReasonNoSnapshot
	}
	if now-r.confirmedAt > int64(r.cfg.MaxAgeMS)*1e6 || now < r.confirmedAt {
		return noSnap, ReasonStale
	}
	if !route.pat.tenant {
		tenant = q.tenant
	}
	if tenant == "" {
		return Pass, ReasonNoTenant
	}
	subject := q.subject
	if r.cfg.Subject.JWTHeader != "" {
		subject = ""
		if q.jwt != "" {
			subject, _ = claimFromPayload(q.jwt, r.cfg.Subject.Claim)
		}
	}
	if subject == "" {
		return Pass, ReasonNoSubject
	}
	return r.snap.Decide(subject, tenant, route.ResourceType, route.Action)
}

// OnRequestHeaders implements proxywasm.Handler.
func (f *Filter) OnRequestHeaders(id uint32, _ int, _ bool) proxywasm.Action {
	r := f.roots[f.streams[id]]
	if r == nil || r.cfg == nil {
		return proxywasm.ActionContinue
	}
	now := f.host.Now()
	q, ok := f.readRequest(r.cfg)
	if !ok {
		f.count(r, mPassed)
		return proxywasm.ActionContinue
	}
	outcome, reason := r.decide(&q, now)
	spoofed := q.spoofed
	q = request{} // its strings alias host memory the next host call may reuse
	switch outcome {
	case Allow:
		f.count(r, mAllowed)
		if err := f.host.ReplaceRequestHeader(DecisionHeader, "edge-allow"); err != nil {
			f.host.Log(proxywasm.LogWarn, "nexus edge: marking request: "+err.Error())
		}
		return proxywasm.ActionContinue
	case Deny:
		f.count(r, mDenied)
		d := denyReplyFor(reason)
		if err := f.host.SendLocalResponse(403, d.details, d.body, d.headers); err != nil {
			f.host.Log(proxywasm.LogError, "nexus edge: sending 403: "+err.Error())
		}
		return proxywasm.ActionPause
	default:
		f.count(r, mPassed)
		if spoofed {
			if err := f.host.RemoveRequestHeader(DecisionHeader); err != nil {
				f.host.Log(proxywasm.LogWarn, "nexus edge: removing client "+DecisionHeader+": "+err.Error())
			}
		}
		return proxywasm.ActionContinue
	}
}

// OnDone implements proxywasm.Handler.
func (f *Filter) OnDone(uint32) bool { return true }

// OnDelete implements proxywasm.Handler.
func (f *Filter) OnDelete(id uint32) {
	if _, ok := f.streams[id]; ok {
		delete(f.streams, id)
		return
	}
	delete(f.roots, id)
}

// alias returns b as a string without copying.
func alias(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// denyReply is a prepared local 403 for one reason code.
type denyReply struct {
	details string
	body    []byte
	headers proxywasm.Pairs
}

func newDenyReply(reason string) denyReply {
	return denyReply{
		details: "nexus_edge_" + reason,
		body:    []byte("nexus edge: forbidden (" + reason + ")\n"),
		headers: proxywasm.EncodePairs([][2]string{
			{"content-type", "text/plain"},
			{DecisionHeader, "edge-deny"},
			{ReasonHeader, reason},
		}),
	}
}

// denyReplies holds the replies of the reasons that deny.
var denyReplies = map[string]denyReply{
	ReasonNoGrant:    newDenyReply(ReasonNoGrant),
	ReasonNoSnapshot: newDenyReply(ReasonNoSnapshot),
	ReasonStale:      newDenyReply(ReasonStale),
}

func denyReplyFor(reason string) denyReply {
	if d, ok := denyReplies[reason]; ok {
		return d
	}
	return newDenyReply(reason)
}
