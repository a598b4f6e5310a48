package gctune

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
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
		{3, 64 << 20, 10000},
		{0, 64 << 20, 10000},
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
