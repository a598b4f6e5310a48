package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is the outcome of a run, written as report.json and report.md.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command,omitempty"`
	Machine  Machine   `json:"machine"`
	DataSet  Manifest  `json:"data_set"`
	Results  []Result  `json:"results"`
	// Notes are free text for the Markdown (e.g. how noisy the machine was).
	Notes []string `json:"notes,omitempty"`
}

// Result is one target (nexus or the baseline) on one interface with one
// check profile.
type Result struct {
	Interface string          `json:"interface"`
	Profile   string          `json:"profile"`
	Target    string          `json:"target"` // nexus or baseline
	Gate      *GateResult     `json:"gate,omitempty"`
	Latency   *LatencyResult  `json:"latency,omitempty"`
	Capacity  *CapacityResult `json:"capacity,omitempty"`
}

// Anchor holds Permit's published Nexus PDP figures (2 CPUs).
type Anchor struct {
	Profile          string
	P50Low, P50High  float64 // ms
	Capacity         float64 // checks/s
	ServerP99Low     float64 // ms, over the profiles
	ServerP99High    float64
	ServerP99Comment string
}

// Anchors are the figures nexus is compared against.
var Anchors = map[string]Anchor{
	"rbac":   {Profile: "rbac", P50Low: 4.3, P50High: 4.3, Capacity: 658, ServerP99Low: 5.6, ServerP99High: 11.3},
	"rebac0": {Profile: "rebac0", ServerP99Low: 5.6, ServerP99High: 11.3},
	"rebac1": {Profile: "rebac1", ServerP99Low: 5.6, ServerP99High: 11.3},
	"rebac2": {Profile: "rebac2", ServerP99Low: 5.6, ServerP99High: 11.3},
	"rebac3": {Profile: "rebac3", P50Low: 9, P50High: 11, Capacity: 261, ServerP99Low: 5.6, ServerP99High: 11.3},
}

// WriteFiles writes report.json and report.md into dir.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	var sb strings.Builder
	r.Markdown(&sb)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

func ms(v float64) string {
	if v < 0 {
		return "-" + ms(-v)
	}
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func pct3(p Percentiles) string { return ms(p.P50) + " / " + ms(p.P95) + " / " + ms(p.P99) }

// Markdown writes the report's tables.
func (r *Report) Markdown(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	c := r.DataSet.Counts
	p("Run %s to %s", r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339))
	if r.Command != "" {
		p(" with `%s`", r.Command)
	}
	p(".\n\nMachine: %d cores (GOMAXPROCS %d), %s, %s, %s; the load generator runs on the same machine.\n\n",
		r.Machine.Cores, r.Machine.GOMAXPROCS, r.Machine.CPU, r.Machine.OS, r.Machine.Go)
	p("Data set `%s`, seed %d: %d tenants, %d users, %d groups, %d resource instances (%d folders in chains of 3, %d files), "+
		"%d parent tuples, %d role assignments (%d tenant roles, %d viewer grants), %d group memberships: %d tuples.\n\n",
		r.DataSet.Profile.Name, r.DataSet.Seed, c.Tenants, c.Users, c.Groups, c.ResourceInstances, c.Folders, c.Files,
		c.ParentTuples, c.RoleAssignments, c.TenantRoles, c.ViewerGrants, c.GroupMembers, c.Tuples)
	for _, n := range r.Notes {
		p("%s\n\n", n)
	}
	var ifaces []string
	seen := map[string]bool{}
	for _, res := range r.Results {
		if !seen[res.Interface] {
			seen[res.Interface] = true
			ifaces = append(ifaces, res.Interface)
		}
	}
	for _, iface := range ifaces {
		p("### %s\n\n", ifaceTitle(iface))
		p("| profile | target | gate | client P50 / P95 / P99 ms | server P50 / P95 / P99 ms | server P99 miss / hit ms | cache hits | capacity /s | P99 at capacity ms | server CPU µs/check | peak RSS MiB | errors 4xx / 5xx / gRPC | decision log emitted |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, res := range r.Results {
			if res.Interface != iface {
				continue
			}
			gate := "-"
			if res.Gate != nil {
				gate = fmt.Sprintf("%d/%d", res.Gate.Right, res.Gate.Checks)
			}
			client, server, split, hits, capa, capP99, cpu, rss, errs, logs := "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"
			var e4, e5, eg int64
			var emitted float64
			if l := res.Latency; l != nil {
				client = pct3(l.Load.Client)
				e4, e5, eg = l.Load.HTTP4xx, l.Load.HTTP5xx, l.Load.GRPCErrors
				if s := l.Server; s != nil {
					server = pct3(s.Latency)
					split = splitP99(s)
					hits = fmt.Sprintf("%.0f%%", 100*s.CacheHitRatio)
					rss = fmt.Sprintf("%.0f", s.PeakRSSBytes/(1<<20))
					emitted += s.LogEmitted
				}
			}
			if cr := res.Capacity; cr != nil {
				capa = fmt.Sprintf("%.0f", cr.Capacity)
				for _, st := range cr.Steps {
					e4 += st.Load.HTTP4xx
					e5 += st.Load.HTTP5xx
					eg += st.Load.GRPCErrors
					if st.Server != nil {
						emitted += st.Server.LogEmitted
						rss = fmt.Sprintf("%.0f", st.Server.PeakRSSBytes/(1<<20))
					}
				}
				if b := cr.Best; b != nil {
					capP99 = ms(b.Load.Client.P99)
					if b.Server != nil {
						cpu = fmt.Sprintf("%.1f", b.Server.CPUPerCheckMicros)
						if hits == "-" {
							hits = fmt.Sprintf("%.0f%%", 100*b.Server.CacheHitRatio)
						}
					}
				}
			}
			if res.Latency != nil || res.Capacity != nil {
				errs = fmt.Sprintf("%d / %d / %d", e4, e5, eg)
				logs = fmt.Sprintf("%.0f", emitted)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				res.Profile, res.Target, gate, client, server, split, hits, capa, capP99, cpu, rss, errs, logs)
		}
		p("\n")
	}
	r.anchorTable(w)
	r.goals(w)
}

func ifaceTitle(iface string) string {
	switch iface {
	case InterfaceGRPC:
		return "gRPC ext_authz (Envoy-shaped CheckRequests)"
	case InterfaceAllowed:
		return "HTTP POST /allowed (Permit-compatible)"
	case InterfaceAuthZEN:
		return "HTTP POST /access/v1/evaluation (AuthZEN)"
	}
	return iface
}

func splitP99(s *ServerStats) string {
	get := func(c string) string {
		if p, ok := s.ByCache[c]; ok {
			return ms(p.P99)
		}
		return "-"
	}
	if d, ok := s.ByCache["disabled"]; ok {
		return "cache off: " + ms(d.P99)
	}
	return get("miss") + " / " + get("hit")
}

// find returns the nexus result of profile over iface.
func (r *Report) find(iface, profile, target string) *Result {
	for i := range r.Results {
		res := &r.Results[i]
		if res.Interface == iface && res.Target == target && (res.Profile == profile || (target == "baseline" && profile == "")) {
			return res
		}
	}
	return nil
}

func rangeMS(lo, hi float64) string {
	if lo == hi {
		return ms(lo)
	}
	return ms(lo) + "-" + ms(hi)
}

func (r *Report) anchorTable(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Against Permit's Nexus PDP (its published figures, 2 CPUs)\n\n")
	p("Ratios are Permit's figure over nexus' (latency) or nexus' over Permit's (capacity), gRPC ext_authz; latency ratios use nexus' client-side P50, which includes the transport.\n\n")
	p("| profile | Permit P50 ms | nexus P50 ms client (server) | ratio | Permit capacity /s | nexus capacity /s | ratio | Permit server P99 ms | nexus server P99 ms at 56/s |\n")
	p("|---|---|---|---|---|---|---|---|---|\n")
	for _, prof := range GateProfiles {
		res := r.find(InterfaceGRPC, prof, "nexus")
		a, ok := Anchors[prof]
		if res == nil || !ok {
			continue
		}
		aP50, nP50, rP50, aCap, nCap, rCap, nP99 := "-", "-", "-", "-", "-", "-", "-"
		if a.P50Low > 0 {
			aP50 = rangeMS(a.P50Low, a.P50High)
		}
		if l := res.Latency; l != nil {
			nP50 = ms(l.Load.Client.P50)
			if l.Server != nil {
				nP50 += " (" + ms(l.Server.Latency.P50) + ")"
				nP99 = ms(l.Server.Latency.P99)
			}
			if a.P50Low > 0 && l.Load.Client.P50 > 0 {
				rP50 = fmt.Sprintf("%.0fx", a.P50Low/l.Load.Client.P50)
			}
		}
		if a.Capacity > 0 {
			aCap = fmt.Sprintf("%.0f", a.Capacity)
		}
		if cr := res.Capacity; cr != nil {
			nCap = fmt.Sprintf("%.0f", cr.Capacity)
			if a.Capacity > 0 {
				rCap = fmt.Sprintf("%.1fx", cr.Capacity/a.Capacity)
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", prof, aP50, nP50, rP50, aCap, nCap, rCap, rangeMS(a.ServerP99Low, a.ServerP99High), nP99)
	}
	p("\n")
}

func (r *Report) goals(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("### Goals of these benchmarks\n\n")
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**not met**"
	}
	for _, iface := range Interfaces {
		base := r.findBaseline(iface)
		if base == nil || base.Capacity == nil || base.Capacity.Capacity == 0 {
			continue
		}
		for _, prof := range []string{"rbac", "rebac3"} {
			res := r.find(iface, prof, "nexus")
			if res == nil || res.Capacity == nil {
				continue
			}
			ratio := res.Capacity.Capacity / base.Capacity.Capacity
			p("- %s %s: capacity %.0f/s is %.0f%% of the allow-only baseline's %.0f/s (goal at least 80%%): %s\n",
				iface, prof, res.Capacity.Capacity, 100*ratio, base.Capacity.Capacity, yes(ratio >= 0.8))
			if iface == InterfaceGRPC && prof == "rbac" && res.Capacity.Best != nil && res.Capacity.Best.Server != nil && base.Capacity.Best != nil && base.Capacity.Best.Server != nil {
				d := res.Capacity.Best.Server.CPUPerCheckMicros - base.Capacity.Best.Server.CPUPerCheckMicros
				p("- grpc rbac: server CPU per check %.1f µs, %.1f µs above the baseline's %.1f µs (goal under 10 µs): %s\n",
					res.Capacity.Best.Server.CPUPerCheckMicros, d, base.Capacity.Best.Server.CPUPerCheckMicros, yes(d < 10))
			}
		}
	}
	for _, g := range []struct {
		prof string
		min  float64
	}{{"rbac", 15000}, {"rebac3", 12000}} {
		if res := r.find(InterfaceGRPC, g.prof, "nexus"); res != nil && res.Capacity != nil {
			p("- grpc %s: %.0f checks/s (goal at least %.0f/s): %s\n", g.prof, res.Capacity.Capacity, g.min, yes(res.Capacity.Capacity >= g.min))
		}
	}
	for _, prof := range GateProfiles {
		if res := r.find(InterfaceGRPC, prof, "nexus"); res != nil && res.Latency != nil && res.Latency.Server != nil {
			v := res.Latency.Server.Latency.P99
			p("- grpc %s: server-side P99 at %.0f/s %s ms (goal under 0.2 ms): %s\n", prof, res.Latency.Load.OfferedRate, ms(v), yes(v < 0.2))
		}
	}
	p("\n")
}

func (r *Report) findBaseline(iface string) *Result {
	for i := range r.Results {
		if r.Results[i].Interface == iface && r.Results[i].Target == "baseline" {
			return &r.Results[i]
		}
	}
	return nil
}
