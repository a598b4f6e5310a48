package cluster

import (
	"errors"
	"fmt"

	"github.com/nexuspdp/nexus/datastore"
)

// ErrUnavailable is returned (wrapped, with the cause) by a write that was
// not written and never will be: the replica could not reach the log
// (NATS unreachable, no JetStream quorum, the store cannot follow the log:
// see Status) and never sent it, or sent it and then fenced it in the log
// before it landed, or the log took it after its deadline. Servers answer
// 503: the client may retry, on this replica or another.
var ErrUnavailable = errors.New("cluster: the cluster log is unavailable; writes are refused while reads go on from local data")

// ErrRevisionTimeout is matched by *RevisionError: WaitRevision gave up
// before this replica applied the revision asked for. A check that asked
// for that revision must fail closed.
var ErrRevisionTimeout = errors.New("cluster: revision not reached in time")

// ErrOutcomeUnknown is returned by a write that may or may not be
// written: it was sent to the log, and the replica could neither see it
// applied nor fence it before the write timeout. Every replica decides the
// same way from the log; a retry with the same write ID (api.WithWriteID,
// an Idempotency-Key) gets the first attempt's outcome and is never
// applied a second time. Servers answer 504.
var ErrOutcomeUnknown = errors.New("cluster: the write's outcome is unknown")

// ErrNotApplied is returned, with ErrOutcomeUnknown and the entry's
// revision, by a write that the log acknowledged but that this replica
// did not apply before the write timeout: the entry is in the log, and
// whether it applies (it does unless the log took it after its deadline)
// every replica decides alike; a retry with the same write ID learns it.
var ErrNotApplied = errors.New("cluster: the write is in the log but not yet applied on this replica")

// ErrContention is returned when a write met a conflicting write from
// another replica more than Config.MaxRetries times in a row.
var ErrContention = errors.New("cluster: too many conflicting writes; try again")

// ErrTooLarge is returned when a write does not fit in one message of the
// log (the NATS server's max_payload).
var ErrTooLarge = errors.New("cluster: write too large for one log message")

// ErrDiverged is the cause of ErrUnavailable when the local store cannot
// follow the log: it is ahead of the log, holds history from another log
// (a stream deleted and created again, a data directory from another
// cluster or from single-node mode), or is behind the log's retention
// with no snapshot that reaches the log. It needs an operator: start the
// replica on an empty data directory.
var ErrDiverged = errors.New("cluster: the local store does not follow this cluster's log")

// ErrNoPolicy is returned by Policy when no policy was loaded through the
// cluster.
var ErrNoPolicy = errors.New("cluster: no policy loaded")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("cluster: replica is closed")

// RevisionError says which revision a wait wanted and where the replica
// was when it gave up.
type RevisionError struct {
	Want, Have datastore.Revision
	Reason     string // why the replica is behind, when known (degraded)
}

func (e *RevisionError) Error() string {
	s := fmt.Sprintf("cluster: revision %d not reached in time (replica at %d)", e.Want, e.Have)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes errors.Is(err, ErrRevisionTimeout) true.
func (e *RevisionError) Is(target error) bool { return target == ErrRevisionTimeout }
