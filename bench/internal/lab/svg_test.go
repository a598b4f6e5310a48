package lab

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// svgElements parses b as XML and counts its elements by name; it fails
// the test on XML that is not well formed or whose root is not an svg.
func svgElements(t *testing.T, b []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	out := map[string]int{}
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well formed: %v\n%s", err, b)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			// encoding/xml accepts a repeated attribute; XML (and every
			// browser) does not
			seen := map[xml.Name]bool{}
			for _, a := range e.Attr {
				if seen[a.Name] {
					t.Fatalf("element %s repeats attribute %s", e.Name.Local, a.Name.Local)
				}
				seen[a.Name] = true
			}
			if depth == 0 && (e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg", e.Name)
			}
			depth++
			out[e.Name.Local]++
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 || out["svg"] != 1 {
		t.Fatalf("unbalanced document (depth %d, %d svg elements)", depth, out["svg"])
	}
	return out
}

func TestBarChartSVG(t *testing.T) {
	c := BarChart{
		Title: `checks/s at the P99 limit <Zipf & "rbac">`, Unit: "checks/s",
		Groups: []string{"rbac", "rebac3", "zipf"},
		Series: []BarSeries{
			{Name: "nexus", Values: []float64{12000, 9000, 11000}, Lo: []float64{11000, 8000, 10000}, Hi: []float64{13000, 9500, 12000}},
			{Name: "OPA", Values: []float64{3000, math.NaN(), 2500}},
		},
	}
	b := c.SVG()
	els := svgElements(t, b)
	// 5 bars and 3 whiskers, plus the legend's 2 swatches and the background.
	if els["rect"] != 5+2+1 {
		t.Fatalf("%d rect elements, want 8", els["rect"])
	}
	if !strings.Contains(string(b), "&lt;Zipf &amp; &#34;rbac&#34;&gt;") {
		t.Fatalf("the title is not escaped:\n%s", b)
	}
	c.Log = true
	svgElements(t, c.SVG())
}

func TestLineChartSVG(t *testing.T) {
	c := LineChart{
		Title: "capacity", XLabel: "offered checks/s", YLabel: "P99 ms", LogY: true, HLine: 30, HLineLabel: "limit",
		Lines: []Line{
			{Name: "nexus", Points: []LinePoint{{1000, 0.5}, {1250, 0.7}, {1562, 45}}},
			{Name: "allow-only", Points: []LinePoint{{1000, 0.3}, {1250, 0.4}}},
			{Name: "empty"},
		},
	}
	els := svgElements(t, c.SVG())
	if els["polyline"] != 2 || els["circle"] != 5 {
		t.Fatalf("%d polylines and %d points, want 2 and 5", els["polyline"], els["circle"])
	}
	c.XTicks = map[float64]string{50: "P50", 95: "P95", 99: "P99"}
	c.LogY = false
	svgElements(t, c.SVG())
	svgElements(t, LineChart{Title: "nothing"}.SVG())
	svgElements(t, BarChart{Title: "nothing"}.SVG())
}

// TestChartsWithoutValues draws charts with nothing to scale (no values,
// only NaN, zero or infinite ones), in log and linear scale: each is a
// well-formed document with a handful of ticks. A log scale over no
// values once started at zero and multiplied it by ten forever.
func TestChartsWithoutValues(t *testing.T) {
	for _, vals := range [][]float64{nil, {math.NaN()}, {0}, {-1, 0}, {math.Inf(1)}, {math.Inf(-1), 3}} {
		for _, log := range []bool{false, true} {
			s := newScale(vals, log)
			if n := len(s.ticks()); n < 2 || n > 12 || !(s.lo < s.hi) || math.IsInf(s.hi, 0) {
				t.Fatalf("values %v, log %v: scale %+v with %d ticks", vals, log, s, n)
			}
			svgElements(t, BarChart{Title: "t", Groups: []string{"g"}, Series: []BarSeries{{Name: "s", Values: vals}}, Log: log}.SVG())
			var pts []LinePoint
			for i, v := range vals {
				pts = append(pts, LinePoint{float64(i), v})
			}
			svgElements(t, LineChart{Title: "t", Lines: []Line{{Name: "l", Points: pts}}, LogY: log}.SVG())
		}
	}
}

// TestPeersReportCharts renders the charts and tables of a report with a
// measured server, an excluded one and a baseline: every chart is well
// formed and the tables say what was measured.
func TestPeersReportCharts(t *testing.T) {
	round := func(capacity, p50 float64) CompareRound {
		return CompareRound{
			Latency:  &LatencyResult{Load: LoadResult{Client: Percentiles{P50: p50, P95: 2 * p50, P99: 3 * p50, Max: 4 * p50}}},
			Capacity: &CapacityResult{Capacity: capacity, LimitMS: 30, Steps: []Step{{Load: LoadResult{OfferedRate: capacity, Client: Percentiles{P99: 5}}, Passed: true}}},
			HitRatio: 0.4, CPUPerCheckMicros: 50,
		}
	}
	r := &PeersReport{Rounds: 3, LatencyRate: 100, Results: []CompareResult{
		{Workload: "zipf", Contender: Contender{Name: "nexus", Interface: "allowed"}, Gate: &GateResult{Checks: 10, Right: 10},
			Rounds: []CompareRound{round(1000, 0.5), round(1200, 0.6), round(900, 0.4)}},
		{Workload: "zipf", Contender: Contender{Name: "OpenFGA", Interface: "openfga"}, Gate: &GateResult{Checks: 10, Right: 9}, Excluded: "answered 1 of 10 gate checks wrongly"},
		{Workload: "zipf", Contender: Contender{Name: "floor", Interface: "grpc", Baseline: true}, Rounds: []CompareRound{round(2000, 0.3)}},
		{Workload: "rbac", Contender: Contender{Name: "nexus", Interface: "allowed"}, Gate: &GateResult{Checks: 10, Right: 10}, Rounds: []CompareRound{round(800, 0.7)}},
	}}
	charts := r.Charts()
	for _, name := range []string{"peers-capacity.svg", "peers-latency.svg", "latency-1.svg", "latency-2.svg", "capacity-curves-1.svg", "capacity-curves-2.svg"} {
		b, ok := charts[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		svgElements(t, b)
	}
	var md strings.Builder
	r.Markdown(&md)
	for _, want := range []string{
		"| nexus | allowed | 10/10 | 1000 (900–1200) | 0.500 (0.400–0.600) |",
		"| OpenFGA | openfga | 9/10 | not measured: answered 1 of 10 gate checks wrongly |",
		"| floor | grpc | not gated (allows everything) | 2000 |",
		"| Permit's published Nexus PDP (2 CPUs) | HTTP | | 658 | 4.30 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the tables lack %q:\n%s", want, md.String())
		}
	}
}
