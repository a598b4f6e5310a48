package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The pool hands each evaluation an instance of its own without a lock
// or a counter shared by all evaluations: every instance has a home slot on
// its own cache line, and taking or returning it is one compare-and-swap
// on that slot. Each processor remembers the slot it used last (a hint in a
// sync.Pool, which is per processor), so an instance tends to stay on one
// core with its memory in that core's cache. A channel is used only to wait
// when every instance is busy.

// Slot values besides an idle instance; nil means the slot's instance is
// in use.
var (
	vacant  = new(instance) // no instance yet: the taker creates one
	retired = new(instance) // the bundle was replaced: take none
)

// errRetired tells Eval to retry on the bundle that replaced this one.
var errRetired = errors.New("engine: bundle retired")

type slot struct {
	v atomic.Pointer[instance]
	_ [56]byte // one slot per cache line: cores do not share them
}

// hint is a slot index; it carries no ownership, so the GC may drop it.
type hint struct{ i int }

type pool struct {
	slots   []slot
	hints   sync.Pool     // *hint: the slot this processor used last
	waiters atomic.Int32  // evaluations waiting for an instance
	ready   chan struct{} // a slot was filled while someone waited
	gone    chan struct{} // closed when the bundle is retired
	// refs is one per live instance plus one while the bundle is loaded;
	// the runtime is closed when it drops to zero.
	refs atomic.Int64
}

func (pl *pool) init(n int) {
	pl.slots = make([]slot, n)
	for i := range pl.slots {
		pl.slots[i].v.Store(vacant)
	}
	pl.ready = make(chan struct{}, n)
	pl.gone = make(chan struct{})
	pl.refs.Store(1)
}

// get takes an idle instance, creating one in a vacant slot, and waits
// while all are busy, until ctx is done or deadline (if not zero) passes
// (context.DeadlineExceeded). It returns errRetired once the bundle is
// replaced.
func (p *policy) get(ctx context.Context, deadline time.Time) (*instance, error) {
	if inst, err := p.tryGet(ctx); inst != nil || err != nil {
		return inst, err
	}
	p.waiters.Add(1)
	defer p.waiters.Add(-1)
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	for {
		// Counted as a waiter before looking again, so a put that
		// this look misses sees the waiter and signals.
		if inst, err := p.tryGet(ctx); inst != nil || err != nil {
			return inst, err
		}
		select {
		case <-p.ready:
		case <-p.gone:
			return nil, errRetired
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-expired:
			return nil, context.DeadlineExceeded
		}
	}
}

// tryGet looks at every slot once, starting at the one this processor
// used last (or a random one), so that concurrent evaluations rarely meet
// on a slot. (nil, nil) means all busy.
func (p *policy) tryGet(ctx context.Context) (*instance, error) {
	n := len(p.slots)
	h, _ := p.hints.Get().(*hint)
	if h == nil {
		h = &hint{i: int(rand.Uint32N(uint32(n)))}
	}
	defer p.hints.Put(h)
	i := h.i
	for range n {
		h.i = i
		s := &p.slots[i].v
		switch v := s.Load(); v {
		case nil:
		case retired:
			return nil, errRetired
		case vacant:
			// The reference is taken before the slot, so a retire that
			// sees the slot in use cannot close the runtime under us.
			p.refs.Add(1)
			if !s.CompareAndSwap(vacant, nil) {
				p.unref()
				break
			}
			inst, err := p.newInstance(ctx, i)
			if err != nil {
				p.release(i)
				p.unref()
				return nil, err
			}
			return inst, nil
		default:
			if s.CompareAndSwap(v, nil) {
				return v, nil
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return nil, nil
}

// put returns inst to its slot, or closes it if it grew too big or the
// bundle was retired while it was in use.
func (p *policy) put(inst *instance) {
	if uint64(inst.mem.Size()) > p.cfg.MaxInstanceBytes {
		p.cfg.Logger.Info("engine: discarding oversized instance", "bytes", inst.mem.Size(), "limit", p.cfg.MaxInstanceBytes)
		p.stats.oversized.Add(1)
		p.discard(inst)
		return
	}
	if !p.slots[inst.slot].v.CompareAndSwap(nil, inst) {
		p.closeInstance(inst) // retired
		return
	}
	p.signal()
}

// discard closes inst after a failed evaluation; its slot becomes vacant.
func (p *policy) discard(inst *instance) {
	p.stats.discarded.Add(1)
	p.closeInstance(inst)
	p.release(inst.slot)
}

// release makes slot i, held by the caller, vacant.
func (p *policy) release(i int) {
	if p.slots[i].v.CompareAndSwap(nil, vacant) {
		p.signal()
	}
}

func (p *policy) signal() {
	if p.waiters.Load() > 0 {
		select {
		case p.ready <- struct{}{}:
		default: // enough wake-ups are pending
		}
	}
}

// closeInstance closes an instance the pool counted.
func (p *policy) closeInstance(inst *instance) {
	p.drop(inst)
	p.unref()
}

// drop forgets and closes inst.
func (p *policy) drop(inst *instance) {
	p.wd.live.Delete(inst.mod)
	_ = inst.mod.Close(context.Background())
}

// retire stops handing out instances, closes the idle ones and drops the
// loaded bundle's reference: the runtime closes when the instances in use
// come back.
func (p *policy) retire() {
	for i := range p.slots {
		v := p.slots[i].v.Swap(retired)
		if v != nil && v != vacant && v != retired {
			p.closeInstance(v)
		}
	}
	close(p.gone)
	p.unref()
}

func (p *policy) unref() {
	if p.refs.Add(-1) == 0 {
		_ = p.runtime.Close(context.Background())
	}
}
