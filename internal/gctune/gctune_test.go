package gctune

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		base, headroom uint64
		want           int
	}{
		{16 << 20, 64 << 20, 400},
		{10 << 20, 64 << 20, 640},
		{64 << 20, 64 << 20, 100},
		{1 << 30, 64 << 20, 100},
		{40 << 20, 64 << 20, 160},
		{3, 64 << 20, 1600},
		{0, 64 << 20, 1600},
		{2 << 20, 64 << 20, 1650},
		{1 << 20, 1 << 30, 10000},
		{1, 0, 100},
	} {
		if got := Percent(c.base, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.base, c.headroom, got, c.want)
		}
	}
}

func TestParseLimit(t *testing.T) {
	for in, want := range map[string]uint64{"max\n": 0, "9223372036854771712\n": 0, "536870912\n": 512 << 20, "": 0, "0": 0, "-1": 0} {
		got, ok := parseLimit(in)
		if got != want || ok != (want != 0) {
			t.Errorf("parseLimit(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}

// gcPercent reads the collector's current target.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTune: after collections, a heap much smaller than the headroom gets
// a target that leaves the headroom; Stop gives back Go's default.
func TestTune(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "off") // Tune must not change this test binary's limit
	tu := Tune(1<<30, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if tu == nil {
		t.Fatal("Tune returned nil without GOGC in the environment")
	}
	defer tu.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() < 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is %d after collections; a test's heap is far below 1 GiB, want more than 1000", gcPercent())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	tu.Stop()
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC is %d after Stop, want 100", p)
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if p := gcPercent(); p != 100 {
		t.Fatalf("GOGC is %d after a collection once stopped, want 100", p)
	}
}

// TestTuneRespectsGOGC: a GOGC in the environment is the user's choice.
func TestTuneRespectsGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	if tu := Tune(1<<30, slog.New(slog.NewTextHandler(io.Discard, nil))); tu != nil {
		tu.Stop()
		t.Fatal("Tune took over the collector although GOGC is set")
	}
}

// TestPercentBoundsLeastGoal: whatever the heap, the runtime's least
// goal at the percent given (4 MiB scaled by it) is within the headroom
// over the heap, as is the growth the percent allows.
func TestPercentBoundsLeastGoal(t *testing.T) {
	const headroom = 64 << 20
	for base := uint64(0); base < 256<<20; base += 64 << 10 {
		p := uint64(Percent(base, headroom))
		if least := uint64(heapMinimum) * p / 100; least > base+headroom && p > 100 {
			t.Fatalf("Percent(%d) = %d: the runtime's least goal %d MiB is over %d MiB", base, p, least>>20, (base+headroom)>>20)
		}
		if grown := base * p / 100; grown > headroom+base/100 && p > 100 { // rounded up to a whole percent
			t.Fatalf("Percent(%d) = %d lets the heap grow by %d MiB", base, p, grown>>20)
		}
	}
}

// TestTuneBoundsHeapGoal: under a stream of short-lived allocations, the
// collector's goal stays within the headroom over what it scans (the
// runtime's own least goal included) whenever the tuner has set GOGC for
// what the last collection found, so a small server's heap, and its
// memory, stay near 64 MiB rather than growing to 400 MiB. (Between a
// collection and the tuner's adjustment, the goal is the runtime's for
// the previous GOGC.)
func TestTuneBoundsHeapGoal(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "off")
	const headroom = 64 << 20
	tu := Tune(headroom, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if tu == nil {
		t.Fatal("Tune returned nil without GOGC in the environment")
	}
	defer tu.Stop()
	n := len(scanned)
	samples := make([]metrics.Sample, n+3)
	for i, name := range scanned {
		samples[i].Name = name
	}
	samples[n].Name = "/gc/heap/goal:bytes"
	samples[n+1].Name = "/gc/gogc:percent"
	samples[n+2].Name = "/gc/cycles/total:gc-cycles"
	var sink []byte
	inStep, cycles := 0, uint64(0)
	for i := 0; i < 400_000; i++ { // about 800 MiB of garbage, 2 KiB at a time
		sink = make([]byte, 2048)
		if i%1000 != 0 {
			continue
		}
		metrics.Read(samples)
		var base uint64
		for _, s := range samples[:n] {
			base += s.Value.Uint64()
		}
		goal, p := samples[n].Value.Uint64(), int(samples[n+1].Value.Uint64())
		cycles = samples[n+2].Value.Uint64()
		want := Percent(base, headroom)
		if p < want*9/10 || p > want*11/10 {
			continue // not yet adjusted to the last collection
		}
		inStep++
		// The tuner leaves a move of less than 10% alone; the goal is
		// computed from the last collection's figures, a few MiB off
		// what is read after it.
		if limit := base + headroom*11/10 + 16<<20; goal > limit {
			t.Fatalf("heap goal %d MiB at GOGC %d with %d MiB scanned: more than the %d MiB headroom allows", goal>>20, p, base>>20, headroom>>20)
		}
	}
	runtime.KeepAlive(sink)
	if cycles == 0 || inStep == 0 {
		t.Fatalf("%d collections, %d samples with GOGC set for the last one", cycles, inStep)
	}
}
