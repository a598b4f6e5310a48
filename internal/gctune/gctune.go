// Package gctune sets the Go garbage collector's target for a server
// whose live heap is small and whose allocation rate is high, as a
// policy decision point's is: every check allocates a few kilobytes that
// die at once, and a replica applying a stream of writes allocates tens
// of kilobytes a commit.
//
// Go's default (GOGC=100) starts a collection each time the heap has
// grown by as much as was live after the last one. With a live heap of
// 16 MiB that is a collection every 16 MiB allocated, several a second
// under load, and each one costs the request goroutines more than its
// own work: they assist the marking, and the stacks the collection
// shrinks grow again on the next request. Tune keeps the growth allowed
// between collections at least a fixed headroom (64 MiB by default), so a
// small heap is collected as often as a 64 MiB one would be; a live heap
// larger than the headroom is left to Go's default.
//
// The user's own settings win: with GOGC in the environment, Tune does
// nothing. With no GOMEMLIMIT and a cgroup memory limit (a container's),
// it also sets Go's soft memory limit to 90% of that limit, so that the
// headroom never takes a process past its container's memory: the
// collector runs more often as the heap nears it.
package gctune

import (
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// DefaultHeadroom is the least the heap may grow between collections.
const DefaultHeadroom = 64 << 20

// Tuner keeps the collector's target; Stop ends it.
type Tuner struct {
	headroom uint64
	stopped  atomic.Bool
	mu       sync.Mutex
	percent  int
	samples  []metrics.Sample
}

// The runtime's measure of what a collection scans, whose size times
// GOGC/100 is how far the heap may grow before the next one: the live
// heap, the goroutine stacks and the globals.
var scanned = []string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// Tune starts keeping the collector's headroom at least headroom bytes,
// unless GOGC is set in the environment (it returns nil then). After
// every collection it sets GOGC to the percent that gives that headroom
// over what the collection found live, or 100 if that is more.
func Tune(headroom uint64, log *slog.Logger) *Tuner {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Debug("GOGC is set: the garbage collector keeps it", "GOGC", v)
		return nil
	}
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok {
		if limit, ok := cgroupMemoryLimit(); ok {
			soft := limit / 10 * 9
			debug.SetMemoryLimit(int64(min(soft, math.MaxInt64)))
			log.Debug("the garbage collector's soft memory limit is 90% of the cgroup's", "bytes", soft)
		}
	}
	t := &Tuner{headroom: headroom, percent: 100}
	t.samples = make([]metrics.Sample, len(scanned))
	for i, name := range scanned {
		t.samples[i].Name = name
	}
	t.adjust()
	t.arm()
	return t
}

// arm runs adjust after the next collection: a finalizer runs once the
// collector has found its object unreachable.
func (t *Tuner) arm() {
	s := new([16]byte) // not tiny-allocated: finalizers on tiny objects may never run
	runtime.SetFinalizer(s, func(*[16]byte) {
		if t.stopped.Load() {
			return
		}
		t.adjust()
		t.arm()
	})
}

// adjust sets GOGC from what the last collection scanned.
func (t *Tuner) adjust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.samples)
	var base uint64
	for _, s := range t.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			base += s.Value.Uint64()
		}
	}
	p := Percent(base, t.headroom)
	// Small moves are not worth a change of the target.
	if p != t.percent && (p < t.percent*9/10 || p > t.percent*11/10 || p == 100) {
		t.percent = p
		debug.SetGCPercent(p)
	}
}

// heapMinimum is the Go runtime's least heap goal at GOGC=100, which it
// scales by GOGC/100 (runtime/mgcpacer.go, defaultHeapMinimum).
const heapMinimum = 4 << 20

// Percent is the GOGC that lets a heap whose collection scans base bytes
// grow by at least headroom: 100 (Go's default) when base is at least
// headroom. The runtime scales its least heap goal (4 MiB) by GOGC/100
// too, so the percent is at most the one that puts that goal at base +
// headroom: without that bound a nearly empty heap (GOGC 10,000) would
// grow to 400 MiB before its first collection, and to that again after
// each one.
func Percent(base, headroom uint64) int {
	if base >= headroom {
		return 100
	}
	p := (base + headroom) * 100 / heapMinimum
	if base > 0 {
		p = min(p, (headroom*100+base-1)/base)
	}
	return int(min(10000, max(100, p)))
}

// Stop gives the collector back Go's default target (or GOGC's).
func (t *Tuner) Stop() {
	if t == nil || t.stopped.Swap(true) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	debug.SetGCPercent(100)
}

// cgroupMemoryLimit reads the memory limit of this process's cgroup as
// a container sees it (v2, then v1), if it has one.
func cgroupMemoryLimit() (uint64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(path); err == nil {
			return parseLimit(string(b))
		}
	}
	return 0, false
}

// parseLimit reads a cgroup memory limit file: "max" (v2) or a number
// near the largest page-aligned int64 (v1) means none.
func parseLimit(s string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || n == 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}
