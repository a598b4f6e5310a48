package pdp

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsLabels holds the decisions' counters and latency, found by
// index, to the labels prometheus would give them by name: a reason
// outside knownReasons is "other", only the series counted are exported,
// and an interface or cache outcome outside the known ones is still
// counted under its own name.
func TestMetricsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, func() float64 { return 0 }, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	m.countDecision(IfaceGRPC, true, "")
	m.countDecision(IfaceGRPC, true, "")
	m.countDecision(IfaceGRPC, false, "no_grant")
	m.countDecision(IfaceHTTP, false, "made up by the policy")
	m.countDecision(IfacePermit, true, CodeUnknownReason)
	m.countDecision("elsewhere", true, "rbac")
	m.observe(IfaceAuthZEN, CacheHit, 3*time.Microsecond)
	m.observe(IfaceAuthZEN, "odd", time.Millisecond)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, l := range mt.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			switch mf.GetName() {
			case "nexus_decisions_total":
				got = append(got, mf.GetName()+"{"+strings.Join(ls, ",")+"} "+strconv.FormatFloat(mt.GetCounter().GetValue(), 'g', -1, 64))
			case "nexus_decision_duration_seconds":
				if c := mt.GetHistogram().GetSampleCount(); c > 0 {
					got = append(got, mf.GetName()+"{"+strings.Join(ls, ",")+"}")
				}
			}
		}
	}
	want := []string{
		"nexus_decision_duration_seconds{cache=hit,interface=authzen}",
		"nexus_decision_duration_seconds{cache=odd,interface=authzen}",
		"nexus_decisions_total{interface=elsewhere,reason=rbac,result=allow} 1",
		"nexus_decisions_total{interface=grpc,reason=,result=allow} 2",
		"nexus_decisions_total{interface=grpc,reason=no_grant,result=deny} 1",
		"nexus_decisions_total{interface=http,reason=other,result=deny} 1",
		"nexus_decisions_total{interface=permit,reason=other,result=allow} 1",
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
