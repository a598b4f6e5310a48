package pdp

import (
	"maps"
	"sync"
	"sync/atomic"

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

type metrics struct {
	latency   *prometheus.HistogramVec
	decisions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	// pre-resolved observers for the hot path: [iface][cache]
	obs map[[2]string]prometheus.Observer
	// counters are decisions' counters resolved so far, by interface,
	// result and reason, copied on write (countedMu) so that a check
	// reads them without a lock or prometheus' label hashing.
	counters  atomic.Pointer[map[[3]string]prometheus.Counter]
	countedMu sync.Mutex
}

// countDecision counts a decision with these labels.
func (m *metrics) countDecision(iface, result, reason string) {
	k := [3]string{iface, result, reason}
	if cs := m.counters.Load(); cs != nil {
		if c, ok := (*cs)[k]; ok {
			c.Inc()
			return
		}
	}
	m.countedMu.Lock()
	defer m.countedMu.Unlock()
	old := m.counters.Load()
	cs := make(map[[3]string]prometheus.Counter, 1)
	if old != nil {
		cs = maps.Clone(*old)
	}
	c, ok := cs[k]
	if !ok {
		c = m.decisions.WithLabelValues(iface, result, reason)
		cs[k] = c
		m.counters.Store(&cs)
	}
	c.Inc()
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
		obs: map[[2]string]prometheus.Observer{},
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
	for _, i := range []string{IfaceGRPC, IfaceHTTP, IfaceAuthZEN, IfacePermit} {
		for _, c := range []string{CacheHit, CacheMiss, CacheDisabled} {
			m.obs[[2]string{i, c}] = m.latency.WithLabelValues(i, c)
		}
	}
	return m, nil
}
