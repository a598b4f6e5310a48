package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"
)

// LoadConfig is one open-model load window: arrivals at a constant rate,
// each sent at its scheduled time if fewer than MaxInFlight requests are
// outstanding, and dropped (counted, not sent) otherwise.
type LoadConfig struct {
	// Rate is the arrival rate (requests per second); it must be > 0.
	Rate float64
	// MaxInFlight bounds outstanding requests; it must be > 0.
	MaxInFlight int
	// Duration is the length of the window; it must be > 0.
	Duration time.Duration
	// Expect makes a decision other than the check's expected one a
	// failure (false for an allow-only baseline).
	Expect bool
	// Seed draws the checks; the same seed draws the same sequence.
	Seed uint64
	// Tick is the shortest sleep of the dispatcher: arrivals due within
	// it are sent together when it ends (their latency still counts from
	// their own scheduled time). Zero means 1 ms; negative means sleep
	// until each arrival.
	Tick time.Duration
}

func (c LoadConfig) validate() error {
	if !(c.Rate > 0) || c.MaxInFlight <= 0 || c.Duration <= 0 || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("%w: rate %v, in flight %d, duration %v: all must be positive", ErrConfig, c.Rate, c.MaxInFlight, c.Duration)
	}
	return nil
}

// Percentiles summarise latencies in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms,omitempty"`
}

// LoadResult counts what happened in one window. Latency is measured from
// each request's scheduled send time to its answer, so a slow server or
// a late load generator shows in it (no coordinated omission).
type LoadResult struct {
	OfferedRate float64 `json:"offered_rate"`
	// AchievedRate is Completed over the window.
	AchievedRate float64 `json:"achieved_rate"`
	Scheduled    int64   `json:"scheduled"`
	Sent         int64   `json:"sent"`
	// Dropped arrivals found MaxInFlight requests outstanding.
	Dropped   int64 `json:"dropped"`
	Completed int64 `json:"completed"`
	// Failed requests got no decision (transport, gRPC or HTTP error) or,
	// with Expect, a wrong one.
	Failed  int64 `json:"failed"`
	Wrong   int64 `json:"wrong"`
	Allowed int64 `json:"allowed"`
	// HTTP4xx counts 4xx answers that carry no decision (a proxy's 403
	// deny is a decision, not counted here).
	HTTP4xx    int64 `json:"http_4xx"`
	HTTP5xx    int64 `json:"http_5xx"`
	GRPCErrors int64 `json:"grpc_errors"`
	// Client is the latency seen by the load generator.
	Client  Percentiles `json:"client"`
	Elapsed float64     `json:"elapsed_s"`
	// FirstError is one failure, for the report.
	FirstError string `json:"first_error,omitempty"`
}

// DroppedRatio is Dropped over Scheduled.
func (r LoadResult) DroppedRatio() float64 {
	if r.Scheduled == 0 {
		return 0
	}
	return float64(r.Dropped) / float64(r.Scheduled)
}

// newHistogram records nanoseconds from 1 µs to 60 s with 3 significant
// digits.
func newHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1000, 60e9, 3) }

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	ms := func(v int64) float64 { return float64(v) / 1e6 }
	return Percentiles{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)), P95: ms(h.ValueAtQuantile(95)), P99: ms(h.ValueAtQuantile(99)),
		Max: ms(h.Max()),
	}
}

// spinBelow is the interval from which the dispatcher wakes spinEarly
// before each arrival and spins to it.
const (
	spinBelow = 2 * time.Millisecond
	spinEarly = 1500 * time.Microsecond
)

type job struct {
	sched time.Time
	req   *Request
}

// tally counts the outcomes of one window; the workers share it.
type tally struct {
	expect bool

	mu   sync.Mutex
	hist *hdrhistogram.Histogram

	inflight                                            atomic.Int64
	completed, failed, wrong, allowed, c4xx, c5xx, grpc atomic.Int64
	firstErr                                            atomic.Pointer[string]
}

// record counts the outcome o of j, answered lat after its scheduled time.
func (t *tally) record(j job, o Outcome, lat time.Duration) {
	t.inflight.Add(-1)
	t.mu.Lock()
	_ = t.hist.RecordValue(int64(lat))
	t.mu.Unlock()
	t.completed.Add(1)
	bad := o.Err != nil
	switch {
	case o.HTTPStatus >= 500:
		t.c5xx.Add(1)
	case o.HTTPStatus >= 400 && o.Err != nil:
		// a 4xx that is not a decision (a proxy's 403 deny is one)
		t.c4xx.Add(1)
	}
	if o.Err != nil && o.GRPCCode != codes.OK {
		t.grpc.Add(1)
	}
	if o.Err == nil {
		if o.Allowed {
			t.allowed.Add(1)
		}
		if o.Allowed != j.req.check.Allow {
			t.wrong.Add(1)
			if t.expect {
				bad = true
				if t.firstErr.Load() == nil {
					s := fmt.Sprintf("wrong decision %v for %+v", o.Allowed, j.req.check)
					t.firstErr.CompareAndSwap(nil, &s)
				}
			}
		}
	} else if t.firstErr.Load() == nil {
		s := o.Err.Error()
		t.firstErr.CompareAndSwap(nil, &s)
	}
	if bad {
		t.failed.Add(1)
	}
}

// fill copies the counts into res.
func (t *tally) fill(res *LoadResult) {
	res.Completed, res.Failed, res.Wrong, res.Allowed = t.completed.Load(), t.failed.Load(), t.wrong.Load(), t.allowed.Load()
	res.HTTP4xx, res.HTTP5xx, res.GRPCErrors = t.c4xx.Load(), t.c5xx.Load(), t.grpc.Load()
	if s := t.firstErr.Load(); s != nil {
		res.FirstError = *s
	}
	res.Client = percentiles(t.hist)
}

// Load runs one window against t, drawing requests at random from reqs.
func Load(ctx context.Context, t *Target, reqs []Request, cfg LoadConfig) (LoadResult, error) {
	if err := cfg.validate(); err != nil {
		return LoadResult{}, err
	}
	if len(reqs) == 0 {
		return LoadResult{}, fmt.Errorf("%w: no requests", ErrConfig)
	}
	res := LoadResult{OfferedRate: cfg.Rate}
	if cfg.Tick == 0 {
		cfg.Tick = time.Millisecond
	}
	tl := &tally{expect: cfg.Expect, hist: newHistogram()}
	jobs := make(chan job, cfg.MaxInFlight)
	var wg sync.WaitGroup
	for range cfg.MaxInFlight {
		wg.Go(func() {
			for j := range jobs {
				o := t.Send(ctx, j.req)
				tl.record(j, o, time.Since(j.sched))
			}
		})
	}
	start := time.Now()
	err := dispatch(ctx, cfg, reqs, jobs, &tl.inflight, start, &res)
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start).Seconds()
	tl.fill(&res)
	window := min(res.Elapsed, cfg.Duration.Seconds())
	if window > 0 {
		res.AchievedRate = float64(res.Completed) / window
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return res, err
	}
	return res, nil
}

// dispatch sends the window's arrivals to jobs at their scheduled times
// from start, each to a free worker or counted as dropped when
// MaxInFlight are in flight, and sets res.Scheduled, Sent and Dropped.
// It returns ctx's error if ctx ends first.
func dispatch(ctx context.Context, cfg LoadConfig, reqs []Request, jobs chan<- job, inflight *atomic.Int64, start time.Time, res *LoadResult) error {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Rate*1000)))
	pick := picker(reqs)
	total := int64(cfg.Duration.Seconds() * cfg.Rate)
	if total < 1 {
		total = 1
	}
	interval := float64(time.Second) / cfg.Rate
	var next int64
	defer func() { res.Scheduled = next }()
	for next < total {
		now := time.Now()
		due := min(int64(float64(now.Sub(start))/interval)+1, total)
		for ; next < due; next++ {
			sched := start.Add(time.Duration(float64(next) * interval))
			if inflight.Load() >= int64(cfg.MaxInFlight) {
				res.Dropped++
				continue
			}
			inflight.Add(1)
			jobs <- job{sched: sched, req: &reqs[pick(rng)]}
			res.Sent++
		}
		if next >= total {
			break
		}
		at := start.Add(time.Duration(float64(next) * interval))
		wait := time.Until(at)
		if wait > 0 && cfg.Tick > 0 {
			wait = max(wait, cfg.Tick)
		}
		// Go's timers may fire up to a millisecond late when the process
		// is idle (the poller sleeps in whole milliseconds). At low rates
		// wake early and spin to the scheduled time, so that the
		// generator's own lateness does not show as latency.
		spin := interval >= float64(spinBelow) && wait > 0
		if spin {
			wait -= spinEarly
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return ctx.Err()
		}
		if spin {
			for time.Now().Before(at) {
				runtime.Gosched()
			}
		}
	}
	return nil
}

// picker returns a draw of request indexes: uniform, or in proportion to
// each check's N when a workload file set it.
func picker(reqs []Request) func(*rand.Rand) int {
	weighted := false
	for i := range reqs {
		if reqs[i].check.N > 1 {
			weighted = true
			break
		}
	}
	if !weighted {
		return func(r *rand.Rand) int { return r.IntN(len(reqs)) }
	}
	cum := make([]uint64, len(reqs))
	var total uint64
	for i := range reqs {
		total += uint64(max(reqs[i].check.N, 1))
		cum[i] = total
	}
	return func(r *rand.Rand) int {
		x := r.Uint64N(total)
		i, _ := slices.BinarySearch(cum, x+1)
		return i
	}
}
