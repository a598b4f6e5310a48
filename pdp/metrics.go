package pdp

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/version"
)

// Interfaces, the "interface" label of the decision metrics and of the
// decision log.
const (
	IfaceGRPC    = "grpc"
	IfaceHTTP    = "http"
	IfaceAuthZEN = "authzen"
	IfacePermit  = "permit"
)

// Cache outcomes, Decision.Cache and the "cache" label.
const (
	CacheHit      = "hit"
	CacheMiss     = "miss"
	CacheDisabled = "disabled"
)

// knownReasons bounds the "reason" label: reasons a policy gives outside
// this set are counted as "other".
var knownReasons = map[string]bool{
	"": true, "rbac": true, "rebac": true, "abac": true, "no_grant": true, "no_route": true,
	"no_subject": true, "locked": true, "allow": true, "deny": true,
	CodeBadRequest: true, CodeTooLarge: true, CodeNotReady: true, CodePolicyResult: true,
	CodeUndefined: true, CodeInternal: true, CodeUnknownType: true, CodeStoreError: true,
	CodeCanceled: true, CodeDeadline: true, CodeConflict: true, CodeDepthExceeded: true,
	CodeRevisionUnavailable: true, CodeUnavailable: true, CodeBudget: true, CodeOutcomeUnknown: true, CodePreconditionFailed: true,
	"tenant_mismatch": true, "no_tenant": true, "invalid_subject": true,
	engine.CodeMemory: true, engine.CodeAbort: true, engine.CodeBuiltin: true,
	engine.CodeInvalidResult: true, engine.CodeTrap: true,
}

func reasonLabel(r string) string {
	if knownReasons[r] {
		return r
	}
	return CodeUnknownReason
}

// reasonIndex numbers the known reasons, CodeUnknownReason last
// (reasonLabels), to index decisions' counters.
var reasonIndex, reasonLabels = func() (map[string]int, []string) {
	idx := make(map[string]int, len(knownReasons))
	labels := make([]string, 0, len(knownReasons)+1)
	for r := range knownReasons {
		idx[r] = len(labels)
		labels = append(labels, r)
	}
	return idx, append(labels, CodeUnknownReason)
}()

// ifaces and caches are the label values of interface and cache, in the
// order of the metrics' arrays.
var (
	ifaces = [...]string{IfaceGRPC, IfaceHTTP, IfaceAuthZEN, IfacePermit}
	caches = [...]string{CacheHit, CacheMiss, CacheDisabled}
)

type metrics struct {
	latency   *prometheus.HistogramVec
	decisions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	// obs are the latency's observers, resolved ahead, by interface and
	// cache (ifaces, caches).
	obs [len(ifaces)][len(caches)]prometheus.Observer
	// counted are the decisions' counters, by interface, result (allow,
	// deny) and reason (reasonLabels), each resolved on its first
	// decision, as prometheus.CounterVec would export it, so that a
	// check finds its counter by index, without a lock or prometheus'
	// label hashing.
	counted [len(ifaces)][2][]atomic.Pointer[prometheus.Counter]
}

// observe records a decision's latency.
func (m *metrics) observe(iface, cache string, elapsed time.Duration) {
	if i, c := slices.Index(ifaces[:], iface), slices.Index(caches[:], cache); i >= 0 && c >= 0 {
		m.obs[i][c].Observe(elapsed.Seconds())
		return
	}
	m.latency.WithLabelValues(iface, cache).Observe(elapsed.Seconds())
}

// countDecision counts a decision of iface, allowed or not, with reason
// (its label is reasonLabel's).
func (m *metrics) countDecision(iface string, allowed bool, reason string) {
	r, ok := reasonIndex[reason]
	if !ok {
		r = len(reasonLabels) - 1 // CodeUnknownReason
	}
	result, a := "deny", 1
	if allowed {
		result, a = "allow", 0
	}
	i := slices.Index(ifaces[:], iface)
	if i < 0 {
		m.decisions.WithLabelValues(iface, result, reasonLabels[r]).Inc()
		return
	}
	slot := &m.counted[i][a][r]
	c := slot.Load()
	if c == nil {
		// Resolved concurrently, it is the same counter either way.
		rc := m.decisions.WithLabelValues(iface, result, reasonLabels[r])
		c = &rc
		slot.Store(c)
	}
	(*c).Inc()
}

// latencyBuckets are sized for microseconds: 5 µs to 100 ms.
var latencyBuckets = []float64{
	5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 150e-6, 200e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
}

func newMetrics(reg prometheus.Registerer, logEmitted, logDropped func() float64) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nexus_decision_duration_seconds",
			Help:    "Server-side time to answer one check, from request decoded to response built, by interface and decision-cache outcome.",
			Buckets: latencyBuckets,
		}, []string{"interface", "cache"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nexus_decisions_total",
			Help: "Decisions the policy made, by interface, result (allow or deny) and reason. Requests that failed are in nexus_decision_errors_total instead.",
		}, []string{"interface", "result", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nexus_decision_errors_total",
			Help: "Checks that failed, and so were denied without a policy decision (malformed requests included), by interface and reason code.",
		}, []string{"interface", "code"}),
	}
	v := version.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "nexus_build_info",
		Help:        "Always 1: the version and commit of nexus and the Go, OPA and wazero it was built with, as labels.",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion, "opa": v.OPA, "wazero": v.Wazero},
	})
	buildInfo.Set(1)
	cs := []prometheus.Collector{m.latency, m.decisions, m.errors, buildInfo,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nexus_decisionlog_emitted_total", Help: "Decision log events written.",
		}, logEmitted),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nexus_decisionlog_dropped_total", Help: "Decision log events dropped because the queue was full.",
		}, logDropped),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for i, iface := range ifaces {
		for c, cache := range caches {
			m.obs[i][c] = m.latency.WithLabelValues(iface, cache)
		}
		for a := range m.counted[i] {
			m.counted[i][a] = make([]atomic.Pointer[prometheus.Counter], len(reasonLabels))
		}
	}
	return m, nil
}
