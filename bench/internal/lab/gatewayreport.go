package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// result returns the result of target behind proxy, or nil.
func (r *GatewayReport) result(proxy, target string) *GatewayResult {
	for i := range r.Results {
		if r.Results[i].Proxy == proxy && r.Results[i].Target == target {
			return &r.Results[i]
		}
	}
	return nil
}

func (r *GatewayReport) proxies() []string {
	var out []string
	for _, g := range r.Results {
		if len(out) == 0 || out[len(out)-1] != g.Proxy {
			out = append(out, g.Proxy)
		}
	}
	return out
}

// added is the spread over rounds of nexus' percentile minus the
// allow-only one's in the same round.
func (r *GatewayReport) added(proxy string, q func(Percentiles) float64) Spread {
	n, a := r.result(proxy, TargetNexus), r.result(proxy, TargetAllowOnly)
	if n == nil || a == nil {
		return spreadOf(nil)
	}
	var vs []float64
	for i := range min(len(n.Rounds), len(a.Rounds)) {
		vs = append(vs, q(n.Rounds[i].Load.Client)-q(a.Rounds[i].Load.Client))
	}
	return spreadOf(vs)
}

// Markdown writes the gateway tables.
func (r *GatewayReport) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	rounds := 0
	if len(r.Results) > 0 {
		rounds = len(r.Results[0].Rounds)
	}
	p("Gateway run %s to %s", r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))
	if r.Command != "" {
		p(" with `%s`", r.Command)
	}
	p(": %.0f requests/s through each proxy for %d rounds of %.0f s, workload %s (%d distinct checks); "+
		"the proxy forwards every request to nexus' forward-auth endpoint and, when allowed, to a loopback upstream that answers at once. "+
		"Figures are the median over the rounds, with the range in brackets.\n\n",
		r.Rate, rounds, r.Duration, r.Workload, r.Distinct)
	p("| proxy | nexus | gate | through the proxy P50 / P95 / P99 ms | added P50 / P95 / P99 ms (vs allow-only) | nexus P50 / P95 / P99 ms | cache hits | decision log events | proxy 4xx / 5xx | failed | nexus CPU s (µs/request) | nexus peak RSS MiB |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, proxy := range r.proxies() {
		for _, tgt := range []string{TargetNexus, TargetAllowOnly, TargetNoCache} {
			g := r.result(proxy, tgt)
			if g == nil {
				continue
			}
			gate := "-"
			if g.Gate != nil {
				gate = fmt.Sprintf("%d/%d", g.Gate.Right, g.Gate.Checks)
			}
			added := "-"
			if tgt == TargetNexus {
				added = r.added(proxy, p50).String() + " / " + r.added(proxy, p95).String() + " / " + r.added(proxy, p99).String()
			}
			var hits, decisions, logs, cpu, peak float64
			var e4, e5, failed, sent int64
			for _, rd := range g.Rounds {
				e4, e5, failed, sent = e4+rd.Load.HTTP4xx, e5+rd.Load.HTTP5xx, failed+rd.Load.Failed, sent+rd.Load.Completed
				cpu += rd.CPUSeconds
				peak = math.Max(peak, rd.PeakRSSBytes)
				if s := rd.Server; s != nil {
					hits += float64(s.ByCache["hit"].Count)
					decisions += s.Decisions
					logs += s.LogEmitted
				}
			}
			hit := "-"
			if decisions > 0 && tgt != TargetNoCache {
				hit = fmt.Sprintf("%.1f%%", 100*hits/decisions)
			} else if tgt == TargetNoCache {
				hit = "off"
			}
			perReq := "-"
			if sent > 0 {
				perReq = fmt.Sprintf("%.2f (%.0f)", cpu, cpu/float64(sent)*1e6)
			}
			p("| %s | %s | %s | %s / %s / %s | %s | %s / %s / %s | %s | %.0f | %d / %d | %d | %s | %.0f |\n",
				proxy, tgt, gate, g.clientSpread(p50), g.clientSpread(p95), g.clientSpread(p99), added,
				g.serverSpread("", p50), g.serverSpread("", p95), g.serverSpread("", p99), hit, logs, e4, e5, failed, perReq, peak/(1<<20))
		}
	}
	p("\nnexus' own time by decision-cache outcome (P50 / P95 / P99 ms, median over the rounds; `disabled` is the --no-cache server):\n\n")
	p("| proxy | hit | miss | disabled |\n|---|---|---|---|\n")
	for _, proxy := range r.proxies() {
		cell := func(tgt, cache string) string {
			g := r.result(proxy, tgt)
			if g == nil {
				return "-"
			}
			s := g.serverSpread(cache, p50)
			if math.IsNaN(s.Median) {
				return "-"
			}
			return ms(s.Median) + " / " + ms(g.serverSpread(cache, p95).Median) + " / " + ms(g.serverSpread(cache, p99).Median)
		}
		p("| %s | %s | %s | %s |\n", proxy, cell(TargetNexus, "hit"), cell(TargetNexus, "miss"), cell(TargetNoCache, "disabled"))
	}
	p("\n![latency through the gateway](gateway-latency.svg)\n")
}

// Chart is the gateway latency chart: P50, P95 and P99 through each
// proxy for each target, with their range over the rounds.
func (r *GatewayReport) Chart() BarChart {
	c := BarChart{Title: fmt.Sprintf("Through the proxy at %.0f requests/s (median, range; log scale)", r.Rate), Unit: "ms", Log: true}
	tgts := []string{TargetAllowOnly, TargetNexus, TargetNoCache}
	for _, proxy := range r.proxies() {
		for _, q := range []string{"P50", "P95", "P99"} {
			c.Groups = append(c.Groups, proxy+" "+q)
		}
	}
	for _, tgt := range tgts {
		s := BarSeries{Name: tgt}
		for _, proxy := range r.proxies() {
			g := r.result(proxy, tgt)
			for _, q := range []func(Percentiles) float64{p50, p95, p99} {
				v := spreadOf(nil)
				if g != nil {
					v = g.clientSpread(q)
				}
				s.Values, s.Lo, s.Hi = append(s.Values, v.Median), append(s.Lo, v.Min), append(s.Hi, v.Max)
			}
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// WriteFiles writes gateway.json, gateway.md and gateway-latency.svg into dir.
func (r *GatewayReport) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var md strings.Builder
	r.Markdown(&md)
	for name, data := range map[string][]byte{
		"gateway.json": append(b, '\n'), "gateway.md": []byte(md.String()), "gateway-latency.svg": r.Chart().SVG(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}
