package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nexuspdp/nexus/datastore"
)

// Headers of a write's log entry. Every attempt of one write carries the
// same write ID and deadline; JetStream's message id is
// "<write id>@<deadline>".
const (
	hdrWriteID  = "Nexus-Write-Id"
	hdrDeadline = "Nexus-Deadline" // unix nanoseconds
)

// SeenWindow is how long the replicas remember the write IDs they applied:
// a write whose ID was applied less than this before (by log time) is
// recorded without effect, and its writer gets the first outcome.
const SeenWindow = 10 * time.Minute

// deadlineShare is the part of the write timeout after which no replica
// applies the write any more: the rest of the timeout is left to fence
// it and learn its outcome.
const deadlineShare = 3.0 / 5.0

// Replica metadata keys of the seen-ID and fence tables.
const (
	metaSeen  = "cluster.seen/"  // + write ID: seenRecord
	metaFence = "cluster.fence/" // + message id: log time (unix nanos)
)

// seenRecord is what became of an applied write: its revision, its log
// time, and if it was rejected, why (code and message).
type seenRecord struct {
	Rev  uint64 `json:"r"`
	Time int64  `json:"t"`
	Code string `json:"c,omitempty"`
	Msg  string `json:"m,omitempty"`
}

// outcome returns the answer the first attempt got.
func (s seenRecord) outcome() (datastore.Revision, error) {
	if s.Code == "" {
		return datastore.Revision(s.Rev), nil
	}
	cause := map[string]error{
		"precondition_failed": datastore.ErrPreconditionFailed, "invalid_tuple": datastore.ErrInvalidTuple,
		"no_schema": datastore.ErrNoSchema, "schema_orphans": datastore.ErrSchemaOrphans,
	}[s.Code]
	if cause == nil {
		return datastore.Revision(s.Rev), fmt.Errorf("%w: revision %d: %s", datastore.ErrBatchRejected, s.Rev, s.Msg)
	}
	return datastore.Revision(s.Rev), fmt.Errorf("%w: revision %d: %w: %s", datastore.ErrBatchRejected, s.Rev, cause, s.Msg)
}

func rejectCode(err error) string {
	switch {
	case errors.Is(err, datastore.ErrPreconditionFailed):
		return "precondition_failed"
	case errors.Is(err, datastore.ErrInvalidTuple):
		return "invalid_tuple"
	case errors.Is(err, datastore.ErrNoSchema):
		return "no_schema"
	case errors.Is(err, datastore.ErrSchemaOrphans):
		return "schema_orphans"
	}
	return "rejected"
}

// seenTable mirrors the seen-ID and fence tables of the store, in log
// order for pruning. It is used by the apply goroutine only, except for
// lookups under Replica.mu.
type seenTable struct {
	seen   map[string]seenRecord
	fences map[string]int64
	order  []seenKey // in log order; stale keys are skipped when pruned
}

type seenKey struct {
	key  string // metadata key
	time int64
}

func newSeenTable() *seenTable {
	return &seenTable{seen: map[string]seenRecord{}, fences: map[string]int64{}}
}

// loadSeen reads the tables from the store (after a start or a restore).
func loadSeen(ctx context.Context, store *datastore.BoltStore) (*seenTable, error) {
	t := newSeenTable()
	seen, err := store.ReplicaMetaPrefix(ctx, metaSeen)
	if err != nil {
		return nil, err
	}
	for k, v := range seen {
		var rec seenRecord
		if json.Unmarshal(v, &rec) == nil {
			t.seen[strings.TrimPrefix(k, metaSeen)] = rec
			t.order = append(t.order, seenKey{k, rec.Time})
		}
	}
	fences, err := store.ReplicaMetaPrefix(ctx, metaFence)
	if err != nil {
		return nil, err
	}
	for k, v := range fences {
		if ts, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			t.fences[strings.TrimPrefix(k, metaFence)] = ts
			t.order = append(t.order, seenKey{k, ts})
		}
	}
	// Keys added later are appended in log order; loaded ones are sorted
	// by time.
	slices.SortStableFunc(t.order, func(a, b seenKey) int { return cmp.Compare(a.time, b.time) })
	return t, nil
}

// prune drops the records older than SeenWindow before now (a log time)
// and returns the metadata deletions for the entry's batch.
func (t *seenTable) prune(now int64, meta map[string][]byte) map[string][]byte {
	cut := now - int64(SeenWindow)
	n := 0
	for n < len(t.order) && t.order[n].time < cut {
		k := t.order[n]
		n++
		if id, ok := strings.CutPrefix(k.key, metaSeen); ok {
			if rec, ok := t.seen[id]; !ok || rec.Time != k.time {
				continue // written again since
			}
			delete(t.seen, id)
		} else {
			id := strings.TrimPrefix(k.key, metaFence)
			if ts, ok := t.fences[id]; !ok || ts != k.time {
				continue
			}
			delete(t.fences, id)
		}
		if meta == nil {
			meta = map[string][]byte{}
		}
		meta[k.key] = nil
	}
	t.order = t.order[n:]
	return meta
}

// writeHeaders reads a write's headers: "" and zero without them (an
// entry of an older replica, applied as before).
func writeHeaders(h nats.Header) (id, msgID string, deadline int64) {
	id = h.Get(hdrWriteID)
	if id == "" {
		return "", "", 0
	}
	deadline, _ = strconv.ParseInt(h.Get(hdrDeadline), 10, 64)
	return id, h.Get(nats.MsgIdHdr), deadline
}

// Outcomes of a write that did not apply.
var (
	errExpired = errors.New("the log took the write after its deadline")
	errFenced  = errors.New("the write reached the log after its writer fenced it")
)
