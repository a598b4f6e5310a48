package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PeersReport is a side-by-side run: nexus, its baselines and its peers.
type PeersReport struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command,omitempty"`
	Machine  Machine   `json:"machine"`
	// LoadAvg is the machine's 1-minute load average at the start and
	// the end (from /proc/loadavg).
	LoadAvg     [2]float64      `json:"load_avg"`
	DataSet     Manifest        `json:"data_set"`
	Rounds      int             `json:"rounds"`
	LatencyRate float64         `json:"latency_rate"`
	LatencyS    float64         `json:"latency_window_s"`
	StepS       float64         `json:"capacity_step_s"`
	Bisect      int             `json:"bisect_steps"`
	Results     []CompareResult `json:"results"`
	Notes       []string        `json:"notes,omitempty"`
}

// LoadAverage reads the 1-minute load average (0 if unreadable).
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func (r *PeersReport) workloads() []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range r.Results {
		if !seen[x.Workload] {
			seen[x.Workload] = true
			out = append(out, x.Workload)
		}
	}
	return out
}

func (r *PeersReport) contenders() []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range r.Results {
		if !seen[x.Contender.Name] {
			seen[x.Contender.Name] = true
			out = append(out, x.Contender.Name)
		}
	}
	return out
}

func (r *PeersReport) result(workload, contender string) *CompareResult {
	for i := range r.Results {
		if r.Results[i].Workload == workload && r.Results[i].Contender.Name == contender {
			return &r.Results[i]
		}
	}
	return nil
}

func count(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
}

func countSpread(s Spread) string {
	if math.IsNaN(s.Median) {
		return "-"
	}
	if s.N <= 1 || s.Min == s.Max {
		return count(s.Median)
	}
	return count(s.Median) + " (" + count(s.Min) + "–" + count(s.Max) + ")"
}

// Markdown writes the tables: one per workload.
func (r *PeersReport) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	c := r.DataSet.Counts
	p("Run %s to %s", r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))
	if r.Command != "" {
		p(" with `%s`", r.Command)
	}
	p(".\n\nMachine: %d cores, %s, %s, %s; load average %.2f at the start, %.2f at the end; the load generator and every server share the machine.\n\n",
		r.Machine.Cores, r.Machine.CPU, r.Machine.OS, r.Machine.Go, r.LoadAvg[0], r.LoadAvg[1])
	p("Data set `%s`, seed %d: %d users, %d resource instances, %d tuples. "+
		"%d rounds, each visiting the servers in a rotated order; per round and server: %.0f s at %.0f checks/s (P50, P99), then capacity steps of %.0f s growing x1.25 and %d bisection steps. "+
		"Figures are the median over the rounds, the range in brackets. CPU per check is the server process' CPU time over the capacity run (from /proc) over the checks it answered.\n\n",
		r.DataSet.Profile.Name, r.DataSet.Seed, c.Users, c.ResourceInstances, c.Tuples, r.Rounds, r.LatencyS, r.LatencyRate, r.StepS, r.Bisect)
	for _, n := range r.Notes {
		p("%s\n\n", n)
	}
	for _, wl := range r.workloads() {
		p("### %s\n\n", wl)
		p("| server | interface | gate | capacity checks/s | P50 ms | P99 ms | server CPU µs/check | cache hits | peak RSS MiB |\n")
		p("|---|---|---|---|---|---|---|---|---|\n")
		for _, name := range r.contenders() {
			x := r.result(wl, name)
			if x == nil {
				continue
			}
			gate := "not gated (allows everything)"
			if x.Gate != nil {
				gate = fmt.Sprintf("%d/%d", x.Gate.Right, x.Gate.Checks)
			}
			if x.Excluded != "" {
				p("| %s | %s | %s | not measured: %s | | | | | |\n", name, x.Contender.Interface, gate, x.Excluded)
				continue
			}
			hits := "-"
			if s := x.spread(roundHits); !math.IsNaN(s.Median) {
				hits = fmt.Sprintf("%.1f%%", 100*s.Median)
				if s.N > 1 && s.Max > s.Min {
					hits += fmt.Sprintf(" (%.1f–%.1f)", 100*s.Min, 100*s.Max)
				}
				if x.Contender.Name == TargetNoCache || x.Contender.Name == TargetNoCache+" (gRPC)" {
					hits = "off"
				}
			}
			var peak float64
			for _, rd := range x.Rounds {
				peak = math.Max(peak, rd.PeakRSSBytes)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %.0f |\n", name, x.Contender.Interface, gate,
				countSpread(x.spread(roundCapacity)), x.spread(roundP50), x.spread(roundP99), x.spread(roundCPU), hits, peak/(1<<20))
		}
		if a, ok := Anchors[strings.TrimPrefix(wl, "gate ")]; ok && a.Capacity > 0 {
			p("| Permit's published Nexus PDP (2 CPUs) | HTTP | | %s | %s | | | | |\n", count(a.Capacity), anchorP50(a))
		}
		p("\n")
	}
	p("![capacity](peers-capacity.svg)\n\n![latency at a fixed rate](peers-latency.svg)\n\n")
	for i := range r.workloads() {
		p("![latency distribution](latency-%d.svg)\n\n![capacity curves](capacity-curves-%d.svg)\n\n", i+1, i+1)
	}
}

func anchorP50(a Anchor) string {
	if a.P50Low == a.P50High {
		return ms(a.P50Low)
	}
	return ms(a.P50Low) + "–" + ms(a.P50High)
}

// Charts returns the report's charts by file name.
func (r *PeersReport) Charts() map[string][]byte {
	out := map[string][]byte{}
	wls, names := r.workloads(), r.contenders()
	capc := BarChart{Title: "Checks/s at the P99 limit (median and range over rounds)", Unit: "checks/s", Groups: wls}
	lat := BarChart{Title: fmt.Sprintf("P50 and P99 at %.0f checks/s (median and range; log scale)", r.LatencyRate), Unit: "ms", Log: true}
	for _, wl := range wls {
		lat.Groups = append(lat.Groups, wl+" P50", wl+" P99")
	}
	for _, name := range names {
		cs := BarSeries{Name: name}
		ls := BarSeries{Name: name}
		for _, wl := range wls {
			x := r.result(wl, name)
			c, p5, p9 := spreadOf(nil), spreadOf(nil), spreadOf(nil)
			if x != nil && x.Excluded == "" {
				c, p5, p9 = x.spread(roundCapacity), x.spread(roundP50), x.spread(roundP99)
			}
			cs.Values, cs.Lo, cs.Hi = append(cs.Values, c.Median), append(cs.Lo, c.Min), append(cs.Hi, c.Max)
			ls.Values, ls.Lo, ls.Hi = append(ls.Values, p5.Median, p9.Median), append(ls.Lo, p5.Min, p9.Min), append(ls.Hi, p5.Max, p9.Max)
		}
		capc.Series = append(capc.Series, cs)
		lat.Series = append(lat.Series, ls)
	}
	for i, wl := range wls {
		lc := LineChart{Title: fmt.Sprintf("Latency distribution at %.0f checks/s: %s (median over rounds)", r.LatencyRate, wl),
			XLabel: "percentile", YLabel: "client latency ms (log scale)", LogY: true,
			XTicks: map[float64]string{1: "P50", 2: "P95", 3: "P99", 4: "max"}}
		for _, name := range names {
			x := r.result(wl, name)
			if x == nil || x.Excluded != "" {
				continue
			}
			l := Line{Name: name}
			for k, q := range []func(Percentiles) float64{p50, p95, p99, func(p Percentiles) float64 { return p.Max }} {
				v := x.spread(func(rd CompareRound) float64 {
					if rd.Latency == nil {
						return math.NaN()
					}
					return q(rd.Latency.Load.Client)
				}).Median
				if !math.IsNaN(v) {
					l.Points = append(l.Points, LinePoint{X: float64(k + 1), Y: math.Max(v, 0.001)})
				}
			}
			lc.Lines = append(lc.Lines, l)
		}
		out[fmt.Sprintf("latency-%d.svg", i+1)] = lc.SVG()
	}
	out["peers-capacity.svg"] = capc.SVG()
	out["peers-latency.svg"] = lat.SVG()
	for i, wl := range wls {
		lc := LineChart{Title: "Capacity steps, first round: " + wl, XLabel: "offered checks/s", YLabel: "client P99 ms (log scale)", LogY: true}
		for _, name := range names {
			x := r.result(wl, name)
			if x == nil || len(x.Rounds) == 0 || x.Rounds[0].Capacity == nil {
				continue
			}
			l := Line{Name: name}
			for _, st := range x.Rounds[0].Capacity.Steps {
				if !st.Bisect {
					l.Points = append(l.Points, LinePoint{X: st.Load.OfferedRate, Y: math.Max(st.Load.Client.P99, 0.001)})
				}
				lc.HLine = x.Rounds[0].Capacity.LimitMS
			}
			lc.Lines = append(lc.Lines, l)
		}
		lc.HLineLabel = "P99 limit"
		out[fmt.Sprintf("capacity-curves-%d.svg", i+1)] = lc.SVG()
	}
	return out
}

// WriteFiles writes peers.json, peers.md and the charts into dir.
func (r *PeersReport) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var md strings.Builder
	r.Markdown(&md)
	files := r.Charts()
	files["peers.json"] = append(b, '\n')
	files["peers.md"] = []byte(md.String())
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}
