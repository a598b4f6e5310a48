package pdp

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nexuspdp/nexus/datastore"
)

// DefaultRevisionWait bounds how long a check that carries a consistency
// token waits for the store to reach it, when Config.RevisionWait is zero.
const DefaultRevisionWait = 2 * time.Second

// RevisionHeader is the request header (Envoy CheckRequest headers,
// forward auth) that carries a consistency token: the lowest data revision
// a check may be answered at.
const RevisionHeader = "x-nexus-revision"

// RevisionContextKey is the field of an application check's context
// (AuthZEN, Permit) that carries a consistency token.
const RevisionContextKey = "nexus_revision"

// RevisionWaiter waits until the local data has reached a revision. A
// cluster replica waits for the log to be applied up to it; a single store
// can only wait for its own writes.
type RevisionWaiter interface {
	// WaitRevision returns nil once the data is at min or later; an error
	// (bounded by the waiter) when it is not in time.
	WaitRevision(ctx context.Context, min datastore.Revision) error
}

// ParseRevision reads a consistency token: a decimal revision from 1 to
// 2^64-1, as write responses return it. Anything else is ErrBadRequest.
func ParseRevision(s string) (datastore.Revision, error) {
	if s == "" || len(s) > 20 || s[0] == '0' || s[0] == '+' {
		return 0, Errorf(ErrBadRequest, "consistency token %q: want a revision, a decimal number from 1 to 18446744073709551615", trimToken(s))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, Errorf(ErrBadRequest, "consistency token %q: want a revision, a decimal number from 1 to 18446744073709551615", trimToken(s))
	}
	return datastore.Revision(n), nil
}

func trimToken(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// WaitRevision waits until the data has reached min (a check's
// consistency token; zero means none) so that the check that follows sees
// every write up to it. It is bounded (Config.RevisionWait, or the cluster
// replica's own bound); when the data is still behind it returns an error
// matching ErrRevisionUnavailable, counted for iface, and the check must
// fail closed.
func (p *PDP) WaitRevision(ctx context.Context, iface string, min datastore.Revision) error {
	if min == 0 {
		return nil
	}
	if err := p.cfg.Revisions.WaitRevision(ctx, min); err != nil {
		err = fmt.Errorf("%w: %w", ErrRevisionUnavailable, err)
		p.CountError(iface, err)
		return err
	}
	return nil
}

// storeWaiter waits for a store's own revision: in a single process the
// revision moves only with local writes, so a token above it is not
// reached unless a write comes during the wait.
type storeWaiter struct {
	store Store
	max   time.Duration
}

func (w storeWaiter) WaitRevision(ctx context.Context, min datastore.Revision) error {
	deadline := time.Now().Add(w.max)
	delay := time.Millisecond
	for {
		rev, err := w.store.Revision(ctx)
		if err != nil {
			return err
		}
		if rev >= min {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("revision %d not reached in %v (the store is at %d)", min, w.max, rev)
		}
		t := time.NewTimer(min2(delay, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("revision %d not reached (the store is at %d): %w", min, rev, ctx.Err())
		case <-t.C:
		}
		delay = min2(2*delay, 50*time.Millisecond)
	}
}

func min2(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// Revision is a data revision (datastore.Revision), for transports that
// carry consistency tokens.
type Revision = datastore.Revision
