package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"
)

// Contender is one server measured side by side with the others.
type Contender struct {
	// Name is how the report names it ("nexus", "OPA", ...).
	Name string `json:"name"`
	// Target reaches it.
	Target TargetConfig `json:"-"`
	// Interface is Target.Interface, for the report.
	Interface string `json:"interface"`
	// PID is its process, read in /proc for CPU time and peak memory
	// (zero: not read).
	PID int `json:"-"`
	// MetricsURL is nexus' /metrics, for the cache-hit ratio and nexus'
	// own latency ("": none).
	MetricsURL string `json:"-"`
	// Baseline marks a server that allows everything (the allow-only
	// nexus, the transport floor): it is not gated, and is measured on
	// the first workload only (its answers do not depend on the check).
	Baseline bool `json:"baseline,omitempty"`
	// Only, if set, limits it to the first workload (as a baseline).
	FirstOnly bool `json:"first_only,omitempty"`
}

// Workload is a named list of checks.
type Workload struct {
	Name   string
	Checks []Check
	// Limit is the P99 a capacity step must stay under.
	Limit time.Duration
}

// CompareConfig is a side-by-side run: every contender on every workload,
// in rounds, each round visiting the contenders in a rotated order.
type CompareConfig struct {
	Workloads  []Workload
	Contenders []Contender
	// Rounds zero means 3.
	Rounds int
	// Latency is the fixed-rate run of each round (Expect, MetricsURL and
	// Seed are set per contender).
	Latency LatencyConfig
	// Capacity is the stepped run of each round (Limit per workload).
	// Rounds after the first start three steps below the contender's
	// capacity in the first round.
	Capacity CapacityConfig
	// GateSample is how many checks of each workload are gated for every
	// contender before it is measured (0: all of them).
	GateSample int
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// CompareRound is one round of one contender on one workload.
type CompareRound struct {
	Latency  *LatencyResult  `json:"latency,omitempty"`
	Capacity *CapacityResult `json:"capacity,omitempty"`
	// CPUPerCheckMicros is the server process' CPU time over the capacity
	// run (from /proc/PID/stat) over the checks it answered.
	CPUPerCheckMicros float64 `json:"cpu_per_check_us"`
	// PeakRSSBytes is the process' VmHWM after the round.
	PeakRSSBytes float64 `json:"peak_rss_bytes"`
	// HitRatio is nexus' decision-cache hit ratio over the latency and
	// capacity runs (-1: not a nexus with metrics).
	HitRatio float64 `json:"cache_hit_ratio"`
}

// CompareResult is one contender on one workload.
type CompareResult struct {
	Workload  string         `json:"workload"`
	Contender Contender      `json:"contender"`
	Gate      *GateResult    `json:"gate,omitempty"`
	Rounds    []CompareRound `json:"rounds,omitempty"`
	// Excluded says why it was not measured (a wrong gate).
	Excluded string `json:"excluded,omitempty"`
}

// Compare gates and measures every contender on every workload.
func Compare(ctx context.Context, cfg CompareConfig) ([]CompareResult, error) {
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	logf := func(format string, a ...any) { fmt.Fprintf(log, format+"\n", a...) }
	type slot struct {
		res  *CompareResult
		t    *Target
		reqs []Request
		cap1 float64
	}
	var out []*slot
	byWorkload := map[string][]*slot{}
	defer func() {
		for _, s := range out {
			_ = s.t.Close()
		}
	}()
	for wi, w := range cfg.Workloads {
		for _, c := range cfg.Contenders {
			if (c.Baseline || c.FirstOnly) && wi > 0 {
				continue
			}
			c.Interface = c.Target.Interface
			t, err := NewTarget(c.Target)
			if err != nil {
				return nil, err
			}
			s := &slot{res: &CompareResult{Workload: w.Name, Contender: c}, t: t}
			out = append(out, s)
			if !c.Baseline {
				gate := w.Checks
				if cfg.GateSample > 0 && len(gate) > cfg.GateSample {
					gate = gate[:cfg.GateSample]
				}
				g, err := Gate(ctx, t, gate)
				s.res.Gate = &g
				if err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					wrong, failed, first := 0, 0, ""
					for _, x := range g.Wrong {
						if x.Error != "" {
							failed++
							if first == "" {
								first = x.Error
							}
						} else {
							wrong++
						}
					}
					switch {
					case wrong > 0:
						s.res.Excluded = fmt.Sprintf("answered %d of %d gate checks wrongly", wrong, g.Checks)
					default:
						s.res.Excluded = fmt.Sprintf("failed %d of %d gate checks (%s)", failed, g.Checks, first)
					}
					logf("%s on %s: %s: not measured", c.Name, w.Name, s.res.Excluded)
					continue
				}
				logf("%s on %s: gate %s", c.Name, w.Name, g.Summary())
			}
			if s.reqs, err = t.Prepare(w.Checks); err != nil {
				return nil, err
			}
			byWorkload[w.Name] = append(byWorkload[w.Name], s)
		}
	}
	for r := range cfg.Rounds {
		for _, w := range cfg.Workloads {
			slots := byWorkload[w.Name]
			for k := range slots {
				// rotate the order each round: no contender always runs
				// first or right after another
				s := slots[(k+r)%len(slots)]
				c := s.res.Contender
				rd := CompareRound{HitRatio: -1}
				lc := cfg.Latency
				// every window draws its own sequence (a replay of an earlier
				// window's draws would find them all in nexus' cache)
				seed := uint64(1_000_000*(r+1) + 1000*k + 7*len(w.Name))
				lc.Expect, lc.MetricsURL, lc.Seed = !c.Baseline, c.MetricsURL, seed
				lr, err := Latency(ctx, s.t, s.reqs, lc)
				if err != nil {
					return nil, fmt.Errorf("%s on %s: %w", c.Name, w.Name, err)
				}
				rd.Latency = &lr
				cc := cfg.Capacity
				cc.Expect, cc.MetricsURL, cc.Seed, cc.Limit, cc.StepDown = !c.Baseline, c.MetricsURL, seed+100, w.Limit, true
				if r > 0 && s.cap1 > 0 {
					f := cc.Factor
					if f == 0 {
						f = DefaultStepFactor
					}
					cc.StartRate = math.Max(cc.StartRate, s.cap1/(f*f*f))
				}
				var before ProcStats
				if c.PID > 0 {
					if before, err = ReadProc(c.PID); err != nil {
						return nil, err
					}
				}
				cr, err := Capacity(ctx, s.t, s.reqs, cc)
				if err != nil {
					return nil, fmt.Errorf("%s on %s: %w", c.Name, w.Name, err)
				}
				rd.Capacity = &cr
				if r == 0 {
					s.cap1 = cr.Capacity
				}
				var checks int64
				var hits, decisions float64
				for _, st := range cr.Steps {
					checks += st.Load.Completed
					if st.Server != nil {
						hits += float64(st.Server.ByCache["hit"].Count)
						decisions += float64(st.Server.Latency.Count)
					}
				}
				if lr.Server != nil {
					hits += float64(lr.Server.ByCache["hit"].Count)
					decisions += float64(lr.Server.Latency.Count)
				}
				if decisions > 0 {
					rd.HitRatio = hits / decisions
				}
				if c.PID > 0 {
					after, err := ReadProc(c.PID)
					if err != nil {
						return nil, err
					}
					if checks > 0 {
						rd.CPUPerCheckMicros = (after.CPUSeconds - before.CPUSeconds) / float64(checks) * 1e6
					}
					rd.PeakRSSBytes = after.PeakRSSBytes
				}
				s.res.Rounds = append(s.res.Rounds, rd)
				hitStr := "-"
				if rd.HitRatio >= 0 {
					hitStr = fmt.Sprintf("%.1f%%", 100*rd.HitRatio)
				}
				logf("round %d: %s on %s: P50 %s P99 %s ms at %.0f/s; capacity %.0f/s; CPU %.1f µs/check; cache hits %s",
					r+1, c.Name, w.Name, ms(lr.Load.Client.P50), ms(lr.Load.Client.P99), lr.Load.OfferedRate, cr.Capacity, rd.CPUPerCheckMicros, hitStr)
			}
		}
	}
	res := make([]CompareResult, len(out))
	for i, s := range out {
		res[i] = *s.res
	}
	return res, nil
}

// spread of a figure of the rounds.
func (r CompareResult) spread(f func(CompareRound) float64) Spread {
	var vs []float64
	for _, rd := range r.Rounds {
		vs = append(vs, f(rd))
	}
	return spreadOf(vs)
}

func roundCapacity(rd CompareRound) float64 {
	if rd.Capacity == nil {
		return math.NaN()
	}
	return rd.Capacity.Capacity
}

func roundP50(rd CompareRound) float64 {
	if rd.Latency == nil {
		return math.NaN()
	}
	return rd.Latency.Load.Client.P50
}

func roundP99(rd CompareRound) float64 {
	if rd.Latency == nil {
		return math.NaN()
	}
	return rd.Latency.Load.Client.P99
}

func roundCPU(rd CompareRound) float64 {
	if rd.CPUPerCheckMicros == 0 {
		return math.NaN()
	}
	return rd.CPUPerCheckMicros
}

func roundHits(rd CompareRound) float64 {
	if rd.HitRatio < 0 {
		return math.NaN()
	}
	return rd.HitRatio
}
