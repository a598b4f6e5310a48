package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// watchdogInterval is how often deadlines of running evaluations are
// checked: a runaway evaluation stops within about this much of its
// deadline.
const watchdogInterval = time.Millisecond

// watchdogGrace is how many ticks without a watched evaluation the
// watchdog waits before it sleeps: under steady load it keeps ticking
// instead of being woken for every evaluation, and an idle engine keeps no
// ticker running.
const watchdogGrace = 100

// watchdog spends the loop budget of instances whose evaluation's context
// is done (their loops then ask the host, which answers stop).
// Evaluations touch no state shared with other evaluations: each marks its
// own instance, and only reads the sleeping flag (a cache line every core
// keeps) unless the watchdog sleeps.
type watchdog struct {
	live     sync.Map // api.Module -> *instance, every instance of every bundle
	sleeping atomic.Bool
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

func newWatchdog() *watchdog {
	return &watchdog{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// started is called after an evaluation with a done channel marked its
// instance: it wakes a sleeping watchdog.
func (w *watchdog) started() {
	if w.sleeping.Load() && w.sleeping.CompareAndSwap(true, false) {
		w.wake <- struct{}{} // buffered; one wake per sleep
	}
}

// scan raises the flags due and reports whether any watched evaluation is
// running.
func (w *watchdog) scan() bool {
	busy := false
	now := time.Now()
	w.live.Range(func(_, v any) bool {
		if v.(*instance).watch(now) {
			busy = true
		}
		return true
	})
	return busy
}

func (w *watchdog) run() {
	defer close(w.done)
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if w.scan() {
			idle = 0
			continue
		}
		if idle++; idle < watchdogGrace {
			continue
		}
		// Sleep. An evaluation marked before the flag was set is found by
		// the second scan; one marked after sees the flag and wakes us.
		t.Stop()
		w.sleeping.Store(true)
		if !w.scan() || !w.sleeping.CompareAndSwap(true, false) {
			// Either nothing runs, or an evaluation cleared the flag
			// and its wake is on the way.
			select {
			case <-w.stop:
				return
			case <-w.wake:
			}
		}
		t.Reset(watchdogInterval)
		idle = 0
	}
}

func (w *watchdog) close() {
	close(w.stop)
	<-w.done
}
