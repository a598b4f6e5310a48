package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Spread is a figure measured in several rounds: the median and the
// range.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// spreadOf summarises vs (NaNs left out).
func spreadOf(vs []float64) Spread {
	var xs []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return Spread{Median: m, Min: xs[0], Max: xs[len(xs)-1], N: len(xs)}
}

// String is "median (min-max)" with ms-style precision.
func (s Spread) String() string {
	if math.IsNaN(s.Median) {
		return "-"
	}
	if s.N <= 1 || s.Min == s.Max {
		return ms(s.Median)
	}
	return ms(s.Median) + " (" + ms(s.Min) + "–" + ms(s.Max) + ")"
}

// Gateway targets: nexus with its default policy (decision cache on and
// off) and the allow-only nexus.
const (
	TargetNexus     = "nexus"
	TargetNoCache   = "nexus --no-cache"
	TargetAllowOnly = "allow-only nexus"
)

// PIDer is a server whose process can be read in /proc.
type PIDer interface{ PID() int }

// GatewayConfig is a gateway run: a real proxy in front of nexus, a
// constant rate of the workload's requests through it.
type GatewayConfig struct {
	// Data is the generated data set (gate files).
	Data string
	// Workload are the checks sent (drawn in proportion to their N).
	Workload []Check
	// WorkloadName names it in the report.
	WorkloadName string
	// Proxies nil means nginx and Caddy.
	Proxies []string
	// Rate zero means 100/s; Duration (per round) zero means 20 s;
	// Rounds zero means 3; Warmup zero means 5 s (negative: none), once
	// per proxy and target before the first round.
	Rate     float64
	Duration time.Duration
	Rounds   int
	Warmup   time.Duration
	// GateSample is how many workload checks (the first ones) are gated
	// through each proxy; zero means 2,000.
	GateSample int
	// GateFiles are the check profiles whose gate files are gated through
	// each proxy too (e.g. rbac, rebac3); nil means none.
	GateFiles []string
	// Work is the directory for the proxies' files.
	Work string
	// Nexus, NoCache and AllowOnly start the servers; NoCache and
	// AllowOnly nil leave them out.
	Nexus, NoCache, AllowOnly func(ctx context.Context) (Server, error)
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

func (c *GatewayConfig) defaults() error {
	if c.Proxies == nil {
		c.Proxies = GatewayProxies
	}
	if c.Rate == 0 {
		c.Rate = 100
	}
	if c.Duration == 0 {
		c.Duration = 20 * time.Second
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.Warmup == 0 {
		c.Warmup = 5 * time.Second
	}
	if c.GateSample == 0 {
		c.GateSample = 2000
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	switch {
	case c.Nexus == nil:
		return fmt.Errorf("%w: a gateway run needs nexus", ErrConfig)
	case len(c.Workload) == 0:
		return fmt.Errorf("%w: a gateway run needs a workload", ErrConfig)
	case !(c.Rate > 0) || c.Duration <= 0 || c.Rounds < 1:
		return fmt.Errorf("%w: rate, duration and rounds must be positive", ErrConfig)
	}
	return nil
}

// GatewayRound is one measured window of one target behind one proxy.
type GatewayRound struct {
	Load   LoadResult   `json:"load"`
	Server *ServerStats `json:"server,omitempty"`
	// CPUSeconds is the server process' CPU time over the window, from
	// /proc/PID/stat; PeakRSSBytes its VmHWM after it.
	CPUSeconds   float64 `json:"cpu_seconds"`
	PeakRSSBytes float64 `json:"peak_rss_bytes"`
}

// GatewayResult is one target behind one proxy over every round.
type GatewayResult struct {
	Proxy  string         `json:"proxy"`
	Target string         `json:"target"`
	Gate   *GateResult    `json:"gate,omitempty"`
	Rounds []GatewayRound `json:"rounds"`
}

// GatewayReport is a gateway run.
type GatewayReport struct {
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Command  string          `json:"command,omitempty"`
	Machine  Machine         `json:"machine"`
	Workload string          `json:"workload"`
	Distinct int             `json:"distinct_checks"`
	Rate     float64         `json:"rate"`
	Duration float64         `json:"round_s"`
	Results  []GatewayResult `json:"results"`
}

// RunGateway starts the upstream, the servers and a proxy per server and
// kind, gates nexus through each proxy, and measures every target behind
// every proxy in interleaved rounds.
func RunGateway(ctx context.Context, cfg GatewayConfig) (*GatewayReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, format+"\n", a...) }
	rep := &GatewayReport{Started: time.Now().UTC(), Machine: machine(), Workload: cfg.WorkloadName,
		Distinct: len(cfg.Workload), Rate: cfg.Rate, Duration: cfg.Duration.Seconds()}
	gate := slices.Clone(cfg.Workload[:min(cfg.GateSample, len(cfg.Workload))])
	for _, p := range cfg.GateFiles {
		cs, err := ReadChecksFile(filepath.Join(cfg.Data, GateFile(p)))
		if err != nil {
			return nil, err
		}
		gate = append(gate, cs...)
	}
	up, err := StartUpstream()
	if err != nil {
		return nil, err
	}
	defer up.Close()
	type srv struct {
		name  string
		start func(context.Context) (Server, error)
		s     Server
	}
	srvs := []*srv{{name: TargetNexus, start: cfg.Nexus}}
	if cfg.AllowOnly != nil {
		srvs = append(srvs, &srv{name: TargetAllowOnly, start: cfg.AllowOnly})
	}
	if cfg.NoCache != nil {
		srvs = append(srvs, &srv{name: TargetNoCache, start: cfg.NoCache})
	}
	for _, s := range srvs {
		logf("starting %s", s.name)
		if s.s, err = s.start(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = s.s.Stop(context.WithoutCancel(ctx)) }()
	}
	type slot struct {
		res  *GatewayResult
		srv  *srv
		tgt  *Target
		reqs []Request
	}
	var slots []*slot
	for _, kind := range cfg.Proxies {
		for _, s := range srvs {
			dir := filepath.Join(cfg.Work, kind+"-"+safeName(s.name))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			lf, err := os.Create(filepath.Join(dir, "proxy.log"))
			if err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			defer lf.Close()
			p, err := StartProxy(ctx, ProxyConfig{Kind: kind, Nexus: s.s.HTTPAddr(), Upstream: up.Addr, Dir: dir, Log: lf})
			if err != nil {
				return nil, err
			}
			defer func() { _ = p.Stop(context.WithoutCancel(ctx)) }()
			t, err := NewTarget(TargetConfig{Interface: InterfaceGateway, Addr: p.URL[len("http://"):]})
			if err != nil {
				return nil, err
			}
			defer func() { _ = t.Close() }()
			sl := &slot{res: &GatewayResult{Proxy: kind, Target: s.name}, srv: s, tgt: t}
			if sl.reqs, err = t.Prepare(cfg.Workload); err != nil {
				return nil, err
			}
			if s.name != TargetAllowOnly {
				g, err := Gate(ctx, t, gate)
				sl.res.Gate = &g
				if err != nil {
					rep.Results = append(rep.Results, *sl.res)
					return rep, fmt.Errorf("%s behind %s: %w", s.name, kind, err)
				}
				logf("%s behind %s: gate %s", s.name, kind, g.Summary())
			}
			if err := t.Warm(ctx, sl.reqs); err != nil {
				return nil, err
			}
			if cfg.Warmup > 0 {
				if _, err := Load(ctx, t, sl.reqs, LoadConfig{Rate: cfg.Rate, MaxInFlight: DefaultCapInFlight, Duration: cfg.Warmup, Seed: uint64(7 + len(slots))}); err != nil {
					return nil, err
				}
			}
			slots = append(slots, sl)
		}
	}
	for r := range cfg.Rounds {
		for k, sl := range slots {
			var rd GatewayRound
			pid := 0
			if p, ok := sl.srv.s.(PIDer); ok {
				pid = p.PID()
			}
			var before ProcStats
			if pid > 0 {
				if before, err = ReadProc(pid); err != nil {
					return nil, err
				}
			}
			err := measured(ctx, sl.srv.s.MetricsURL(), InterfaceGateway, &rd.Server, func() error {
				var err error
				rd.Load, err = Load(ctx, sl.tgt, sl.reqs, LoadConfig{Rate: cfg.Rate, MaxInFlight: DefaultCapInFlight,
					// every window draws its own sequence: a window that replayed
					// the previous one's draws would find them all cached
					Duration: cfg.Duration, Expect: sl.srv.name != TargetAllowOnly, Seed: uint64(1000 + r*len(slots) + k)})
				return err
			})
			if err != nil {
				return nil, err
			}
			if pid > 0 {
				after, err := ReadProc(pid)
				if err != nil {
					return nil, err
				}
				rd.CPUSeconds, rd.PeakRSSBytes = after.CPUSeconds-before.CPUSeconds, after.PeakRSSBytes
			}
			sl.res.Rounds = append(sl.res.Rounds, rd)
			hit := math.NaN()
			if rd.Server != nil {
				hit = rd.Server.CacheHitRatio
			}
			logf("round %d: %s behind %s: P50 %s P95 %s P99 %s ms; hits %.1f%%; 4xx %d 5xx %d; failed %d",
				r+1, sl.srv.name, sl.res.Proxy, ms(rd.Load.Client.P50), ms(rd.Load.Client.P95), ms(rd.Load.Client.P99), 100*hit,
				rd.Load.HTTP4xx, rd.Load.HTTP5xx, rd.Load.Failed)
		}
	}
	for _, sl := range slots {
		rep.Results = append(rep.Results, *sl.res)
	}
	rep.Finished = time.Now().UTC()
	return rep, nil
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// clientSpread is the spread of a client percentile over the rounds.
func (g GatewayResult) clientSpread(q func(Percentiles) float64) Spread {
	var vs []float64
	for _, r := range g.Rounds {
		vs = append(vs, q(r.Load.Client))
	}
	return spreadOf(vs)
}

// serverSpread is the spread of a server percentile for a cache outcome
// ("" for every decision) over the rounds.
func (g GatewayResult) serverSpread(cache string, q func(Percentiles) float64) Spread {
	var vs []float64
	for _, r := range g.Rounds {
		if r.Server == nil {
			continue
		}
		p := r.Server.Latency
		if cache != "" {
			var ok bool
			if p, ok = r.Server.ByCache[cache]; !ok {
				continue
			}
		}
		vs = append(vs, q(p))
	}
	return spreadOf(vs)
}

func p50(p Percentiles) float64 { return p.P50 }
func p95(p Percentiles) float64 { return p.P95 }
func p99(p Percentiles) float64 { return p.P99 }
