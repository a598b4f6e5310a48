package lab

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Server metric names read from /metrics.
const (
	metricDuration   = "nexus_decision_duration_seconds"
	metricDecisions  = "nexus_decisions_total"
	metricErrors     = "nexus_decision_errors_total"
	metricLogEmitted = "nexus_decisionlog_emitted_total"
	metricLogDropped = "nexus_decisionlog_dropped_total"
	metricCPU        = "process_cpu_seconds_total"
	metricPeakRSS    = "nexus_process_peak_resident_memory_bytes"
	metricRSS        = "process_resident_memory_bytes"
)

// Cache outcomes, the server's "cache" label.
var cacheOutcomes = []string{"hit", "miss", "disabled"}

// bucketHist is one cumulative Prometheus histogram.
type bucketHist struct {
	upper []float64 // upper bounds, ascending, +Inf last
	cum   []float64
	count float64
}

// Snapshot is the part of a server's /metrics a report needs.
type Snapshot struct {
	hists      map[[2]string]*bucketHist // [interface, cache]
	decisions  map[string]float64        // interface -> total
	errors     map[string]float64        // interface -> total
	logEmitted float64
	logDropped float64
	cpu        float64
	peakRSS    float64
	rss        float64
}

// Scrape reads the server's /metrics at url.
func Scrape(ctx context.Context, url string) (*Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: metrics: %s answered %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	return snapshotOf(fams), nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func snapshotOf(fams map[string]*dto.MetricFamily) *Snapshot {
	s := &Snapshot{hists: map[[2]string]*bucketHist{}, decisions: map[string]float64{}, errors: map[string]float64{}}
	value := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.GetMetric()) == 0 {
			return 0
		}
		m := f.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue()
		}
		return 0
	}
	if f := fams[metricDuration]; f != nil {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			if h == nil {
				continue
			}
			bh := &bucketHist{count: float64(h.GetSampleCount())}
			for _, b := range h.GetBucket() {
				bh.upper = append(bh.upper, b.GetUpperBound())
				bh.cum = append(bh.cum, float64(b.GetCumulativeCount()))
			}
			if len(bh.upper) == 0 || !math.IsInf(bh.upper[len(bh.upper)-1], 1) {
				bh.upper = append(bh.upper, math.Inf(1))
				bh.cum = append(bh.cum, bh.count)
			}
			s.hists[[2]string{label(m, "interface"), label(m, "cache")}] = bh
		}
	}
	for name, dst := range map[string]map[string]float64{metricDecisions: s.decisions, metricErrors: s.errors} {
		if f := fams[name]; f != nil {
			for _, m := range f.GetMetric() {
				dst[label(m, "interface")] += m.GetCounter().GetValue()
			}
		}
	}
	s.logEmitted, s.logDropped = value(metricLogEmitted), value(metricLogDropped)
	s.cpu, s.peakRSS, s.rss = value(metricCPU), value(metricPeakRSS), value(metricRSS)
	return s
}

// ServerStats are the server's own figures over a window: the difference
// of two snapshots.
type ServerStats struct {
	// Latency is over every decision of the interface; ByCache splits it
	// by decision-cache outcome (hit, miss, disabled). Percentiles are
	// interpolated within the server's buckets.
	Latency       Percentiles            `json:"latency"`
	ByCache       map[string]Percentiles `json:"by_cache"`
	CacheHitRatio float64                `json:"cache_hit_ratio"`
	Decisions     float64                `json:"decisions"`
	Errors        float64                `json:"decision_errors"`
	LogEmitted    float64                `json:"decision_log_emitted"`
	LogDropped    float64                `json:"decision_log_dropped"`
	CPUSeconds    float64                `json:"cpu_seconds"`
	// CPUPerCheckMicros is CPUSeconds over Decisions, in microseconds.
	CPUPerCheckMicros float64 `json:"cpu_per_check_us"`
	PeakRSSBytes      float64 `json:"peak_rss_bytes"`
}

// Diff returns the server's figures for iface (a bench interface) between
// before and after.
func Diff(before, after *Snapshot, iface string) ServerStats {
	mi := metricInterface(iface)
	st := ServerStats{ByCache: map[string]Percentiles{}}
	var all *bucketHist
	for _, c := range cacheOutcomes {
		a := after.hists[[2]string{mi, c}]
		if a == nil {
			continue
		}
		d := a.minus(before.hists[[2]string{mi, c}])
		if d.count <= 0 {
			continue
		}
		st.ByCache[c] = d.percentiles()
		if all == nil {
			all = d
		} else {
			all = all.plus(d)
		}
	}
	if all != nil {
		st.Latency = all.percentiles()
		if h, ok := st.ByCache["hit"]; ok && all.count > 0 {
			st.CacheHitRatio = float64(h.Count) / all.count
		}
	}
	st.Errors = after.errors[mi] - before.errors[mi]
	// Every check answered: the policy's decisions and the failures.
	st.Decisions = after.decisions[mi] - before.decisions[mi] + st.Errors
	st.LogEmitted = after.logEmitted - before.logEmitted
	st.LogDropped = after.logDropped - before.logDropped
	st.CPUSeconds = after.cpu - before.cpu
	if st.Decisions > 0 {
		st.CPUPerCheckMicros = st.CPUSeconds / st.Decisions * 1e6
	}
	st.PeakRSSBytes = after.peakRSS
	if st.PeakRSSBytes == 0 {
		st.PeakRSSBytes = after.rss
	}
	return st
}

func (h *bucketHist) minus(o *bucketHist) *bucketHist {
	d := &bucketHist{upper: h.upper, cum: append([]float64(nil), h.cum...), count: h.count}
	if o == nil || len(o.cum) != len(h.cum) {
		return d
	}
	for i := range d.cum {
		d.cum[i] -= o.cum[i]
	}
	d.count -= o.count
	return d
}

func (h *bucketHist) plus(o *bucketHist) *bucketHist {
	d := &bucketHist{upper: h.upper, cum: append([]float64(nil), h.cum...), count: h.count + o.count}
	for i := range d.cum {
		if i < len(o.cum) {
			d.cum[i] += o.cum[i]
		}
	}
	return d
}

func (h *bucketHist) percentiles() Percentiles {
	return Percentiles{Count: int64(h.count), P50: h.quantile(0.50) * 1e3, P95: h.quantile(0.95) * 1e3, P99: h.quantile(0.99) * 1e3}
}

// quantile interpolates linearly within the bucket that holds rank
// q*count, as Prometheus' histogram_quantile does; a rank in the +Inf
// bucket gives the highest finite bound.
func (h *bucketHist) quantile(q float64) float64 {
	if h.count <= 0 || len(h.upper) == 0 {
		return 0
	}
	rank := q * h.count
	i := sort.Search(len(h.cum), func(i int) bool { return h.cum[i] >= rank })
	if i >= len(h.upper) {
		i = len(h.upper) - 1
	}
	if math.IsInf(h.upper[i], 1) {
		if i == 0 {
			return 0
		}
		return h.upper[i-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.upper[i-1], h.cum[i-1]
	}
	in := h.cum[i] - below
	if in <= 0 {
		return h.upper[i]
	}
	return lo + (h.upper[i]-lo)*(rank-below)/in
}
