package envoygrpc

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexuspdp/nexus/pdp"
)

// DefaultDurationBuckets are the buckets of grpc_request_duration_seconds
// when none are configured, opa-envoy-plugin's.
var DefaultDurationBuckets = []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 3e-3, 5e-3, 0.1, 1}

// Metrics are opa-envoy-plugin's performance metrics, under the plugin's
// own names so that existing dashboards keep working:
// grpc_request_duration_seconds{handler="check"}, the time a successful
// check took, and error_counter{reason}, the checks that failed, by the
// plugin's reason codes. A nil *Metrics records nothing.
type Metrics struct {
	duration prometheus.Observer
	errors   *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg, with buckets (nil means
// DefaultDurationBuckets).
func NewMetrics(reg prometheus.Registerer, buckets []float64) (*Metrics, error) {
	if len(buckets) == 0 {
		buckets = DefaultDurationBuckets
	}
	d := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "grpc_request_duration_seconds",
		Help:    "Duration of ext_authz gRPC checks (opa-envoy-plugin's performance metric).",
		Buckets: buckets,
	}, []string{"handler"})
	e := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "error_counter",
		Help: "ext_authz gRPC checks that failed, by reason (opa-envoy-plugin's performance metric).",
	}, []string{"reason"})
	if err := reg.Register(d); err != nil {
		return nil, err
	}
	if err := reg.Register(e); err != nil {
		return nil, err
	}
	return &Metrics{duration: d.WithLabelValues("check"), errors: e}, nil
}

func (m *Metrics) observe(d time.Duration) {
	if m != nil {
		m.duration.Observe(d.Seconds())
	}
}

// countError counts a failed check under the reason opa-envoy-plugin
// gives the same failure.
func (m *Metrics) countError(err error) {
	if m == nil {
		return
	}
	reason := "envoyauth_eval_error"
	switch {
	case pdp.IsRequestParse(err):
		reason = "request_parse_error"
	case errors.Is(err, context.DeadlineExceeded):
		reason = "check_request_timeout"
	case errors.Is(err, context.Canceled):
		reason = "check_request_cancelled"
	case pdp.Code(err) == pdp.CodePolicyResult:
		reason = "envoyauth_result_error"
	}
	m.errors.WithLabelValues(reason).Inc()
}
