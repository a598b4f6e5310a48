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

// TestTuneBoundsHeapGoal: under a stream of short-lived allocations, the
// collector's goal stays within the headroom over what it scans (the
// runtime's own least goal included), so a small server's heap, and its
// memory, stay near 64 MiB rather than growing to 400 MiB.
func TestTuneBoundsHeapGoal(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "off")
	const headroom = 64 << 20
	tu := Tune(headroom, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if tu == nil {
		t.Fatal("Tune returned nil without GOGC in the environment")
	}
	defer tu.Stop()
	samples := make([]metrics.Sample, len(scanned)+2)
	for i, name := range scanned {
		samples[i].Name = name
	}
	samples[len(scanned)].Name = "/gc/heap/goal:bytes"
	samples[len(scanned)+1].Name = "/gc/cycles/total:gc-cycles"
	var sink []byte
	var worst, worstBase uint64
	cycles := uint64(0)
	for i := 0; i < 400_000; i++ { // about 800 MiB of garbage, 2 KiB at a time
		sink = make([]byte, 2048)
		if i%1000 != 0 {
			continue
		}
		metrics.Read(samples)
		var base uint64
		for _, s := range samples[:len(scanned)] {
			base += s.Value.Uint64()
		}
		if goal := samples[len(scanned)].Value.Uint64(); goal > worst {
			worst, worstBase = goal, base
		}
		cycles = samples[len(scanned)+1].Value.Uint64()
	}
	runtime.KeepAlive(sink)
	if cycles == 0 {
		t.Fatal("no collection ran")
	}
	// The goal is computed from the last collection's figures, which may
	// have been a few MiB larger than what is read after it.
	if slack := uint64(16 << 20); worst > worstBase+headroom+slack {
		t.Fatalf("heap goal %d MiB with %d MiB scanned: more than the %d MiB headroom allows", worst>>20, worstBase>>20, headroom>>20)
	}
}
