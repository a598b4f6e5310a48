package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// evalCtx is the context of one evaluation bounded by a timeout
// (EvalTrustedUntil): its deadline is enforced by the engine's watchdog,
// which already watches every running evaluation, instead of by a timer
// of its own. So bounding an evaluation costs no timer and no goroutine;
// its Done channel, which only some OPA builtins ask for, is made on
// first use.
//
// It is done when its parent is, when the watchdog finds its deadline
// passed (Err is then context.DeadlineExceeded), and when the evaluation
// returns (context.Canceled), as a context.WithTimeout cancelled on return
// would be.
type evalCtx struct {
	context.Context // the parent
	deadline        time.Time
	// state is live, or the reason it ended (stateDeadline,
	// stateCanceled).
	state atomic.Int32

	mu       sync.Mutex
	done     chan struct{} // made by Done
	stopSelf func() bool   // stops the parent's AfterFunc
}

const (
	stateLive int32 = iota
	stateDeadline
	stateCanceled
)

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

var _ context.Context = (*evalCtx)(nil)

func newEvalCtx(parent context.Context, deadline time.Time) *evalCtx {
	return &evalCtx{Context: parent, deadline: deadline}
}

// Deadline is the earlier of its own and its parent's.
func (c *evalCtx) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Err is the parent's error, else DeadlineExceeded once the watchdog saw
// the deadline pass, Canceled once the evaluation returned.
func (c *evalCtx) Err() error {
	switch c.state.Load() {
	case stateDeadline:
		return context.DeadlineExceeded
	case stateCanceled:
		if err := c.Context.Err(); err != nil {
			return err
		}
		return context.Canceled
	}
	return c.Context.Err()
}

// Done returns a channel closed when the context ends.
func (c *evalCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	if c.state.Load() != stateLive || c.Context.Err() != nil {
		c.done = closedChan
		return c.done
	}
	c.done = make(chan struct{})
	if c.Context.Done() != nil {
		c.stopSelf = context.AfterFunc(c.Context, func() { c.end(stateCanceled) })
	}
	return c.done
}

// expire ends the context if its deadline is before now; the watchdog
// calls it on every scan of a running evaluation.
func (c *evalCtx) expire(now time.Time) {
	if c.state.Load() == stateLive && !now.Before(c.deadline) {
		c.end(stateDeadline)
	}
}

// end ends the context for reason (stateDeadline or stateCanceled), if it
// is still live.
func (c *evalCtx) end(reason int32) {
	if !c.state.CompareAndSwap(stateLive, reason) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil && c.done != closedChan {
		close(c.done)
	}
	if c.stopSelf != nil {
		c.stopSelf()
	}
}
