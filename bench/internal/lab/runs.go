package lab

import (
	"context"
	"fmt"
	"time"
)

// Defaults of the published method.
const (
	DefaultLatencyRate     = 56
	DefaultLatencyInFlight = 10
	DefaultWarmup          = 2 * time.Minute
	DefaultMeasure         = 10 * time.Minute
	DefaultStepFactor      = 1.25
	DefaultStep            = 2 * time.Minute
	DefaultCapInFlight     = 200
	DefaultMaxDropped      = 0.01
	DefaultRBACLimit       = 30 * time.Millisecond
	DefaultReBACLimit      = 40 * time.Millisecond
)

// LimitFor is the capacity step's P99 limit of a check profile: 30 ms
// for RBAC, 40 ms for ReBAC.
func LimitFor(profile string) time.Duration {
	if profile == "rbac" {
		return DefaultRBACLimit
	}
	return DefaultReBACLimit
}

// LatencyConfig is a latency run: a warm-up window, then a measured one,
// at a constant arrival rate.
type LatencyConfig struct {
	// Rate is arrivals per second; zero means 56.
	Rate float64
	// MaxInFlight zero means 10.
	MaxInFlight int
	// Warmup zero means 2 minutes; negative means none.
	Warmup time.Duration
	// Duration of the measured window; zero means 10 minutes.
	Duration time.Duration
	// Expect, Seed: see LoadConfig.
	Expect bool
	Seed   uint64
	// MetricsURL, if set, is the server's /metrics, read before and after
	// the measured window for the server-side figures.
	MetricsURL string
}

func (c *LatencyConfig) defaults() {
	if c.Rate == 0 {
		c.Rate = DefaultLatencyRate
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultLatencyInFlight
	}
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	if c.Duration == 0 {
		c.Duration = DefaultMeasure
	}
}

// LatencyResult is the measured window of a latency run.
type LatencyResult struct {
	Load   LoadResult   `json:"load"`
	Server *ServerStats `json:"server,omitempty"`
}

// Latency runs a warm-up window and a measured one.
func Latency(ctx context.Context, t *Target, reqs []Request, cfg LatencyConfig) (LatencyResult, error) {
	cfg.defaults()
	lc := LoadConfig{Rate: cfg.Rate, MaxInFlight: cfg.MaxInFlight, Expect: cfg.Expect, Seed: cfg.Seed}
	if err := t.Warm(ctx, reqs); err != nil {
		return LatencyResult{}, err
	}
	if cfg.Warmup > 0 {
		lc.Duration = cfg.Warmup
		if _, err := Load(ctx, t, reqs, lc); err != nil {
			return LatencyResult{}, err
		}
	}
	lc.Duration, lc.Seed = cfg.Duration, cfg.Seed+1
	var res LatencyResult
	err := measured(ctx, cfg.MetricsURL, t.Interface(), &res.Server, func() error {
		var err error
		res.Load, err = Load(ctx, t, reqs, lc)
		return err
	})
	return res, err
}

// measured runs fn between two scrapes of url (if set) and stores the
// server's figures in *dst.
func measured(ctx context.Context, url, iface string, dst **ServerStats, fn func() error) error {
	var before *Snapshot
	if url != "" {
		var err error
		if before, err = Scrape(ctx, url); err != nil {
			return err
		}
	}
	if err := fn(); err != nil {
		return err
	}
	if url != "" {
		after, err := Scrape(ctx, url)
		if err != nil {
			return err
		}
		// The decision log writes in the background, so its count can
		// trail the decisions by the events not yet written: give it up
		// to two seconds to catch up.
		for deadline := time.Now().Add(2 * time.Second); logBehind(before, after) && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			if after, err = Scrape(ctx, url); err != nil {
				return err
			}
		}
		st := Diff(before, after, iface)
		*dst = &st
	}
	return nil
}

// logBehind reports whether the decision log, which wrote events in the
// window from before to after, has written (or dropped) fewer of them
// than the decisions made.
func logBehind(before, after *Snapshot) bool {
	written := after.logEmitted - before.logEmitted
	if written == 0 {
		return false // no decision log, or nothing decided
	}
	var decided float64
	for iface, n := range after.decisions {
		decided += n - before.decisions[iface]
	}
	return written+after.logDropped-before.logDropped < decided
}

// CapacityConfig is a capacity run: steps of open-model arrivals whose
// rate grows by Factor per step.
type CapacityConfig struct {
	// StartRate is the first step's rate; it must be > 0.
	StartRate float64
	// Factor zero means 1.25; it must be > 1.
	Factor float64
	// Step is each step's length; zero means 2 minutes.
	Step time.Duration
	// MaxInFlight zero means 200.
	MaxInFlight int
	// Limit is the P99 a step must stay under; zero means 30 ms.
	Limit time.Duration
	// MaxDropped is the largest dropped share of a passing step; zero
	// means 1%.
	MaxDropped float64
	// MaxSteps stops the run after so many steps; zero means 60.
	MaxSteps int
	// MaxFails stops the run after so many failing steps in a row; zero
	// means 2 (one failing step may be a transient on a shared machine;
	// capacity is the highest passing step either way).
	MaxFails int
	// Warmup is a window at StartRate before the first step, not judged
	// (connections, caches, the Go runtime); zero means 5 s, negative
	// none.
	Warmup time.Duration
	// Bisect is the number of bisection steps run after the stepping,
	// between the highest passing rate and the failing rate above it
	// (each halves the bracket in log scale: 3 steps narrow x1.25 to
	// under 3%); zero means none.
	Bisect int
	// StepDown halves the rate while the first steps fail (at most four
	// times), so that a start rate above the capacity still finds it.
	StepDown bool
	// Expect, Seed, MetricsURL: see LatencyConfig.
	Expect     bool
	Seed       uint64
	MetricsURL string
	// Progress, if set, sees each step as it ends.
	Progress func(Step)
}

func (c *CapacityConfig) defaults() error {
	if c.Factor == 0 {
		c.Factor = DefaultStepFactor
	}
	if c.Step == 0 {
		c.Step = DefaultStep
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultCapInFlight
	}
	if c.Limit == 0 {
		c.Limit = DefaultRBACLimit
	}
	if c.MaxDropped == 0 {
		c.MaxDropped = DefaultMaxDropped
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = 60
	}
	if c.Warmup == 0 {
		c.Warmup = 5 * time.Second
	}
	if c.MaxFails == 0 {
		c.MaxFails = 2
	}
	if !(c.StartRate > 0) || !(c.Factor > 1) || c.Step < 0 || c.MaxDropped < 0 || c.MaxSteps < 0 {
		return fmt.Errorf("%w: capacity needs a positive start rate and a factor above 1", ErrConfig)
	}
	return nil
}

// Step is one capacity step and its verdict.
type Step struct {
	Load   LoadResult   `json:"load"`
	Server *ServerStats `json:"server,omitempty"`
	Passed bool         `json:"passed"`
	// Bisect marks a step of the bisection after the stepping.
	Bisect bool `json:"bisect,omitempty"`
	// Reason says why a step failed.
	Reason string `json:"reason,omitempty"`
}

// Judge applies the step rule: P99 under limit, no failed request, at
// most maxDropped of the arrivals dropped.
func Judge(r LoadResult, limit time.Duration, maxDropped float64) (bool, string) {
	switch {
	case r.Completed == 0:
		return false, "no request completed"
	case r.Failed > 0:
		return false, fmt.Sprintf("%d failed requests (%s)", r.Failed, r.FirstError)
	case r.DroppedRatio() > maxDropped:
		return false, fmt.Sprintf("%.2f%% dropped (limit %.2f%%)", 100*r.DroppedRatio(), 100*maxDropped)
	case r.Client.P99 >= float64(limit)/float64(time.Millisecond):
		return false, fmt.Sprintf("P99 %.2f ms not under %v", r.Client.P99, limit)
	}
	return true, ""
}

// CapacityResult is a capacity run: every step and the highest passing
// step's rate.
type CapacityResult struct {
	Steps    []Step  `json:"steps"`
	Capacity float64 `json:"capacity"`
	LimitMS  float64 `json:"limit_ms"`
	// Best is the highest passing step (nil if none passed).
	Best *Step `json:"best,omitempty"`
}

// With StepDown, when the first steps fail, Capacity halves the rate (at
// most maxStepsDown times, not under minStepRate) before it counts
// failures.
const (
	maxStepsDown = 4
	minStepRate  = 10
)

// Capacity runs steps until MaxFails fail in a row (or MaxSteps), then
// bisects (CapacityConfig.Bisect).
func Capacity(ctx context.Context, t *Target, reqs []Request, cfg CapacityConfig) (CapacityResult, error) {
	if err := cfg.defaults(); err != nil {
		return CapacityResult{}, err
	}
	res := CapacityResult{LimitMS: float64(cfg.Limit) / float64(time.Millisecond)}
	if err := t.Warm(ctx, reqs); err != nil {
		return res, err
	}
	if cfg.Warmup > 0 {
		if _, err := Load(ctx, t, reqs, LoadConfig{Rate: cfg.StartRate, MaxInFlight: cfg.MaxInFlight, Duration: cfg.Warmup, Seed: cfg.Seed + 1000}); err != nil {
			return res, err
		}
	}
	step := func(i int, rate float64, bisect bool) (Step, error) {
		st := Step{Bisect: bisect}
		err := measured(ctx, cfg.MetricsURL, t.Interface(), &st.Server, func() error {
			var err error
			st.Load, err = Load(ctx, t, reqs, LoadConfig{Rate: rate, MaxInFlight: cfg.MaxInFlight, Duration: cfg.Step, Expect: cfg.Expect, Seed: cfg.Seed + uint64(i)})
			return err
		})
		if err != nil {
			return st, err
		}
		st.Passed, st.Reason = Judge(st.Load, cfg.Limit, cfg.MaxDropped)
		res.Steps = append(res.Steps, st)
		if cfg.Progress != nil {
			cfg.Progress(st)
		}
		return st, nil
	}
	rate := cfg.StartRate
	fails, down := 0, 0
	for i := 0; i < cfg.MaxSteps; i++ {
		st, err := step(i, rate, false)
		if err != nil {
			return res, err
		}
		if cfg.StepDown && !st.Passed && res.Capacity == 0 && down < maxStepsDown && rate/2 >= minStepRate {
			// nothing passed yet: the start rate was too high, look lower
			down++
			rate /= 2
			continue
		}
		if !st.Passed {
			fails++
			if fails >= cfg.MaxFails {
				break
			}
		} else {
			fails = 0
			res.Capacity = rate
		}
		rate *= cfg.Factor
	}
	if failed := res.Capacity * cfg.Factor; cfg.Bisect > 0 && res.Capacity > 0 && failed <= res.Steps[len(res.Steps)-1].Load.OfferedRate {
		i := len(res.Steps)
		c, err := Bisect(res.Capacity, failed, cfg.Bisect, func(r float64) (bool, error) {
			i++
			st, err := step(i, r, true)
			return st.Passed, err
		})
		if err != nil {
			return res, err
		}
		res.Capacity = c
	}
	for i := range res.Steps {
		if res.Steps[i].Passed && res.Steps[i].Load.OfferedRate == res.Capacity {
			res.Best = &res.Steps[i]
		}
	}
	return res, nil
}
