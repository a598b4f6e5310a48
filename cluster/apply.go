package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/nexuspdp/nexus/cluster/internal/wire"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// errGap: the next entry delivered is not the next sequence; entries were
// dropped by the log's retention (or purged) while this replica was away.
var errGap = errors.New("cluster: the log skipped entries this replica has not applied")

// run follows the log until Close, starting again after every failure.
func (r *Replica) run() {
	defer r.wg.Done()
	const first, most = 100 * time.Millisecond, 2 * time.Second
	backoff := first
	for r.ctx.Err() == nil {
		started := time.Now()
		actx, acancel := context.WithCancel(r.ctx)
		r.mu.Lock()
		r.attempt = acancel
		r.mu.Unlock()
		err := r.follow(actx)
		acancel()
		if r.ctx.Err() != nil {
			r.setFollowing(false, nil, ErrClosed)
			return
		}
		r.setFollowing(false, nil, err)
		if time.Since(started) > 10*time.Second {
			backoff = first
		}
		r.log.Warn("not following the cluster log; trying again", "err", err, "in", backoff)
		select {
		case <-r.ctx.Done():
		case <-r.wake:
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, most)
	}
}

// follow sets up the stream and the consumer, restores a snapshot if the
// store needs one, and applies entries until something fails.
func (r *Replica) follow(ctx context.Context) error {
	if !r.nc.IsConnected() {
		return fmt.Errorf("not connected to NATS (%s)", r.nc.Status())
	}
	s, logID, err := r.ensureAssets(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.logID = logID
	r.mu.Unlock()
	if err := r.checkIdentity(ctx, logID); err != nil {
		return err
	}
	if rev, err := r.store.Revision(ctx); err != nil {
		return err
	} else if uint64(rev) != r.applied.Load() {
		return r.foreignWrites(ctx)
	}
	ictx, cancel := context.WithTimeout(ctx, lookupTimeout)
	info, err := s.Info(ictx)
	cancel()
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	r.seeLast(last)
	applied := r.applied.Load()
	if applied > last {
		return fmt.Errorf("%w: the store is at revision %d but the log ends at %d", ErrDiverged, applied, last)
	}
	// An empty store restores the newest snapshot rather than replay the
	// whole log; a store behind the retention must.
	if (applied == 0 && last > 0) || applied+1 < first {
		if err := r.restoreNewest(ctx, first); err != nil {
			return err
		}
		applied = r.applied.Load()
	}
	if applied+1 < first && last >= first {
		return fmt.Errorf("%w: the store is at revision %d, the log keeps %d..%d and no snapshot reaches it", ErrDiverged, applied, first, last)
	}
	seen, err := loadSeen(ctx, r.store)
	if err != nil {
		return fmt.Errorf("seen writes: %w", err)
	}
	r.mu.Lock()
	r.seen = seen
	r.mu.Unlock()
	// An ephemeral pull consumer from the next sequence, remade by this
	// loop whenever it fails: the library's ordered consumer remakes
	// itself too, but waits up to 10s for an answer while a new stream
	// leader is elected, and longer between attempts. Ordering and gaps
	// are checked here, by stream sequence.
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	cons, err := s.CreateConsumer(cctx, jetstream.ConsumerConfig{
		Description:       "nexus replica " + r.id,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       applied + 1,
		AckPolicy:         jetstream.AckNonePolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	ccancel()
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer func() {
		// Best effort: the server drops it after InactiveThreshold anyway.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = s.DeleteConsumer(dctx, cons.CachedInfo().Name)
		cancel()
	}()
	// Heartbeats every 2s: a consumer lost with its server is noticed
	// within seconds, not after the default 30s.
	it, err := cons.Messages(jetstream.PullMaxMessages(512), jetstream.PullExpiry(10*time.Second),
		jetstream.PullHeartbeat(2*time.Second), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	r.setFollowing(true, s, nil)
	r.log.Info("following the cluster log", "stream", r.cfg.streamName(), "from", applied+1, "last", last)
	var since time.Time // the last commit's start, when a run gathers (zero: take what came)
	for {
		run, err := r.nextRun(ctx, it, since)
		if len(run) > 0 {
			start := time.Now()
			if aerr := r.applyRun(ctx, run, logID); aerr != nil {
				return aerr
			}
			// Entries came faster than one commit each: the next run
			// gathers them for applyInterval from this commit's start, so
			// that a steady stream costs at most 1/applyInterval commits
			// a second (each a rewrite of every page it touches) instead
			// of one commit per commit time. A lone entry ends that:
			// single writes are applied at once.
			since = time.Time{}
			if len(run) > 1 {
				since = start
			}
		}
		if err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
}

// ensureAssets finds or creates the stream and the object store bucket,
// and returns the stream with the id of this incarnation of the log.
func (r *Replica) ensureAssets(ctx context.Context) (jetstream.Stream, string, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	name := r.cfg.streamName()
	s, err := r.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		replicas := r.streamReplicas()
		s, err = r.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "nexus cluster " + r.cfg.Name + ": relationship, schema and policy writes",
			Subjects:    []string{r.cfg.subject()},
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			MaxAge:      r.cfg.MaxAge,
			MaxBytes:    r.cfg.MaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
			Duplicates:  2 * time.Minute,
			Metadata:    map[string]string{streamIDKey: nuid.Next()},
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = r.js.Stream(ctx, name) // another replica won the race
		} else if err == nil {
			r.log.Info("created the cluster log", "stream", name, "replicas", replicas, "max_age", r.cfg.MaxAge, "max_bytes", r.cfg.MaxBytes)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("stream %s: %w", name, err)
	}
	r.mu.Lock()
	haveObs := r.obs != nil
	r.mu.Unlock()
	if !haveObs {
		replicas := r.cfg.StreamReplicas
		if info := s.CachedInfo(); info != nil {
			replicas = info.Config.Replicas // the bucket as the log
		}
		obs, err := r.js.ObjectStore(ctx, r.cfg.bucket())
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			obs, err = r.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
				Bucket:      r.cfg.bucket(),
				Description: "nexus cluster " + r.cfg.Name + ": snapshots and policy bundles",
				Storage:     jetstream.FileStorage,
				Replicas:    max(replicas, 1),
			})
			if errors.Is(err, jetstream.ErrBucketExists) {
				obs, err = r.js.ObjectStore(ctx, r.cfg.bucket())
			}
		}
		if err != nil {
			return nil, "", fmt.Errorf("object store %s: %w", r.cfg.bucket(), err)
		}
		r.mu.Lock()
		r.obs = obs
		r.mu.Unlock()
	}
	logID := name
	if info := s.CachedInfo(); info != nil && info.Config.Metadata[streamIDKey] != "" {
		logID += "/" + info.Config.Metadata[streamIDKey]
	}
	return s, logID, nil
}

// streamReplicas is the R of the stream and bucket this replica creates:
// Config.StreamReplicas, or as many as the NATS cluster has servers, at
// most 3.
func (r *Replica) streamReplicas() int {
	n := r.cfg.StreamReplicas
	if n == 0 {
		n = 1
		if r.nc.ConnectedClusterName() != "" {
			seen := map[string]bool{}
			for _, u := range r.nc.Servers() {
				seen[u] = true
			}
			n = min(3, max(1, len(seen)))
		}
		if n == 1 {
			r.log.Warn("the cluster log is kept on one NATS server: it is lost with that server's disk; run 3 NATS servers in a cluster (or set the stream replicas explicitly)")
		}
		return n
	}
	if n == 1 {
		r.log.Warn("the cluster log is kept on one NATS server (stream replicas 1): it is lost with that server's disk")
	}
	return n
}

// checkIdentity refuses a store whose history is not from this log.
func (r *Replica) checkIdentity(ctx context.Context, logID string) error {
	stored, err := r.store.ReplicaMeta(ctx, metaStream)
	if err != nil {
		return err
	}
	r.identified = string(stored) == logID
	switch {
	case stored == nil && r.applied.Load() > 0:
		return fmt.Errorf("%w: the store has %d revisions that are not from the cluster log %s (start from an empty data directory)", ErrDiverged, r.applied.Load(), logID)
	case stored != nil && string(stored) != logID:
		return fmt.Errorf("%w: the store follows log %s, the cluster's log is %s (a stream created again, or another cluster's data directory)", ErrDiverged, stored, logID)
	}
	return nil
}

// foreignWrites reports a store that moved without this replica: written
// directly (Write, WriteSchema, Import) instead of through the log.
func (r *Replica) foreignWrites(ctx context.Context) error {
	cur, _ := r.store.Revision(ctx)
	return fmt.Errorf("%w: the store is at revision %d but this replica applied the log up to %d: it was written outside the cluster", ErrDiverged, cur, r.applied.Load())
}

// maxRun bounds the entries applied in one transaction.
const maxRun = 256

// applyInterval is how long a run gathers entries, from the start of the
// last commit, while they come faster than one commit each and nobody
// waits for them (gather): it bounds the commits of a busy replica to 50
// a second. A commit costs a replica some 170 µs of CPU however few
// entries it holds (it rewrites every page it touches, the free list and
// the meta page), so at 1,000 writes/s gathering for 5 ms cost a replica
// 3% of a core where 20 ms cost it 1%. While somebody waits (a write for
// this replica to apply it, a check for a revision it carries as a
// consistency token), a run gathers for waitedInterval only.
const (
	applyInterval  = 20 * time.Millisecond
	waitedInterval = 5 * time.Millisecond
)

// gather tells the apply loop whether anyone waits for it to apply what
// it has received: while nobody does, a run may gather entries for
// applyInterval, and as soon as somebody does, for waitedInterval.
type gather struct {
	mu      sync.Mutex
	waiting int                // goroutines waiting for the apply
	cancel  context.CancelFunc // ends the gathering under way, if any
}

// begin marks one more goroutine waiting for the replica to apply
// something, and ends the gathering under way; end unmarks it.
func (g *gather) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting++
	if g.cancel != nil {
		g.cancel()
	}
}

func (g *gather) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting--
}

// start returns a context that ends at until, or when a goroutine begins
// waiting, and a function to call when the gathering is over; a nil
// context when a goroutine waits already.
func (g *gather) start(ctx context.Context, until time.Time) (context.Context, func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting > 0 {
		return nil, nil
	}
	gctx, cancel := context.WithDeadline(ctx, until)
	g.cancel = cancel
	return gctx, func() {
		g.mu.Lock()
		g.cancel = nil
		g.mu.Unlock()
		cancel()
	}
}

// nextRun waits for the next entry, then takes the ones already received
// (or, when the log says more follow, on their way), and, when since is
// the start of the last commit, the ones that arrive before
// applyInterval from it (waitedInterval while somebody waits for this
// replica to apply them), up to maxRun: the entries that arrived while
// the last transaction committed share the next one. err is an error of
// the consumer after the run (apply the run, then stop).
func (r *Replica) nextRun(ctx context.Context, it jetstream.MessagesContext, since time.Time) (run []jetstream.Msg, err error) {
	msg, err := it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return nil, err
	}
	run = append(run, msg)
	const short = 200 * time.Microsecond
	var gctx context.Context // gathering while nobody waits
	var until time.Time      // gathering however many wait
	if !since.IsZero() {
		until = since.Add(waitedInterval)
		var stop func()
		if gctx, stop = r.gather.start(ctx, since.Add(applyInterval)); stop != nil {
			defer stop()
		}
	}
	for len(run) < maxRun {
		// Entries already received come at once; the short wait only
		// ends the run when there are none.
		wait, gathering := short, false
		if md, merr := run[len(run)-1].Metadata(); merr == nil && md.NumPending > 0 {
			wait = 20 * time.Millisecond
		} else if gctx != nil && gctx.Err() == nil {
			gathering = true
		} else if left := time.Until(until); left > wait {
			wait = left
		}
		if gathering {
			msg, err = it.Next(jetstream.NextContext(gctx))
		} else {
			msg, err = it.Next(jetstream.NextMaxWait(wait))
		}
		switch {
		case err == nil:
			run = append(run, msg)
		case gathering && ctx.Err() == nil && gctx.Err() != nil:
			gctx = nil // the window closed, or somebody waits: take what came
		case errors.Is(err, nats.ErrTimeout):
			return run, nil
		default:
			return run, err
		}
	}
	return run, nil
}

// entry is a log entry ready to apply.
type entry struct {
	seq   uint64
	batch datastore.Batch
	pol   *Policy
	cause error  // why it applies without effect
	id    string // write ID ("" for an entry without one)
	msgID string
	dup   *seenRecord // the first outcome of a write applied before
	void  bool        // expired or fenced: only its own attempt hears of it
}

// applyRun applies consecutive log entries in one transaction.
func (r *Replica) applyRun(ctx context.Context, run []jetstream.Msg, logID string) error {
	applied := r.applied.Load()
	var es []entry
	for _, msg := range run {
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("entry metadata: %w", err)
		}
		seq := md.Sequence.Stream
		if seq <= applied {
			continue // a restored snapshot already holds it
		}
		if seq != applied+1 {
			if len(es) > 0 {
				break // apply what is contiguous, the gap shows next time
			}
			return fmt.Errorf("%w: next entry %d, applied %d", errGap, seq, applied)
		}
		r.seeLast(seq + md.NumPending)
		e := entry{seq: seq}
		var deadline int64
		e.id, e.msgID, deadline = writeHeaders(msg.Headers())
		if e.batch, e.pol, e.cause, err = r.decode(ctx, seq, msg.Data()); err != nil {
			if len(es) > 0 {
				break
			}
			return err
		}
		e.batch.Time = md.Timestamp
		r.screen(&e, md.Timestamp.UnixNano(), deadline, msg.Data())
		es = append(es, e)
		applied = seq
	}
	if len(es) == 0 {
		return nil
	}
	if !r.identified {
		// The first entry this store applies records which log it follows.
		if es[0].batch.Meta == nil {
			es[0].batch.Meta = map[string][]byte{}
		}
		es[0].batch.Meta[metaStream] = []byte(logID)
	}
	start := time.Now()
	bs := make([]datastore.Batch, len(es))
	for i := range es {
		bs[i] = es[i].batch
	}
	results, err := r.store.ApplyRun(ctx, datastore.Revision(es[0].seq), bs)
	switch {
	case err == nil:
	case errors.Is(err, datastore.ErrRevisionApplied):
		// Restores and applies both run on this goroutine and keep
		// r.applied equal to the store's revision: something else wrote.
		return r.foreignWrites(ctx)
	default:
		return fmt.Errorf("apply entries %d..%d: %w", es[0].seq, applied, err)
	}
	r.identified = true
	r.m.applyDuration.Observe(time.Since(start).Seconds())
	r.m.applyRun.Observe(float64(len(es)))
	for i := range es {
		if results[i] != nil {
			es[i].cause = results[i]
			if es[i].id != "" && es[i].dup == nil && !es[i].void {
				r.mu.Lock()
				rec := r.seen.seen[es[i].id]
				rec.Code, rec.Msg = rejectCode(results[i]), results[i].Error()
				r.seen.seen[es[i].id] = rec
				r.mu.Unlock()
			}
		}
		if es[i].cause != nil {
			r.m.rejected.Inc()
			r.mu.Lock()
			r.rejected++
			r.mu.Unlock()
			r.log.Warn("log entry recorded without effect", "revision", es[i].seq, "err", es[i].cause)
		}
	}
	// A policy the run loads is handed to the server before the run's
	// revisions are published: a check that waits for a policy load's
	// revision (a consistency token, or the loader's own answer) is
	// decided by that policy, not the one before.
	for _, e := range es {
		if e.pol != nil && e.cause == nil {
			e.pol.Revision = datastore.Revision(e.seq)
			r.policyChanged(ctx, *e.pol)
		}
	}
	// Writers hear of their entries before the revision is published, so
	// that one that waits for a later revision (a fence) knows.
	r.mu.Lock()
	for _, e := range es {
		p := r.pending[e.id]
		switch {
		case e.id == "" || p == nil:
		case e.dup != nil:
			p.finish(e.dup.outcome())
		case e.void:
			if p.msgID == e.msgID {
				p.finish(0, fmt.Errorf("%w: write %s was not written: %w", ErrUnavailable, e.id, e.cause))
			}
		default:
			p.finish(datastore.Revision(e.seq), e.cause)
		}
	}
	r.mu.Unlock()
	r.setApplied(applied)
	return nil
}

// screen decides, from the log alone, whether a write entry applies: it is
// void when the log took it after its deadline or after a fence for its
// attempt, a duplicate when its write ID applied within SeenWindow;
// otherwise its outcome is recorded in the seen table, in the same
// transaction. A fence is recorded in the fence table. Records older than
// SeenWindow before the entry's log time are dropped with it.
func (r *Replica) screen(e *entry, now, deadline int64, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.seen
	e.batch.Meta = t.prune(now, e.batch.Meta)
	if e.id == "" && bytes.Contains(data, []byte(`"kind":"fence"`)) {
		m, err := wire.Decode(data)
		if err != nil || m.Kind != wire.KindFence {
			return
		}
		if _, ok := t.fences[m.Fence]; !ok {
			t.fences[m.Fence] = now
			t.order = append(t.order, seenKey{metaFence + m.Fence, now})
			if e.batch.Meta == nil {
				e.batch.Meta = map[string][]byte{}
			}
			e.batch.Meta[metaFence+m.Fence] = []byte(strconv.FormatInt(now, 10))
		}
		return
	}
	if e.id == "" || e.cause != nil {
		return
	}
	empty := func(cause error) {
		e.batch = datastore.Batch{Meta: e.batch.Meta, Time: e.batch.Time}
		e.pol, e.cause = nil, cause
	}
	if _, fenced := t.fences[e.msgID]; fenced {
		e.void = true
		empty(errFenced)
		return
	}
	if deadline != 0 && now > deadline {
		e.void = true
		empty(errExpired)
		return
	}
	if rec, ok := t.seen[e.id]; ok && now-rec.Time <= int64(SeenWindow) {
		e.dup = &rec
		empty(fmt.Errorf("write %s applied at revision %d already", e.id, rec.Rev))
		return
	}
	rec := seenRecord{Rev: e.seq, Time: now}
	t.seen[e.id] = rec
	t.order = append(t.order, seenKey{metaSeen + e.id, now})
	enc, _ := json.Marshal(rec)
	if e.batch.Meta == nil {
		e.batch.Meta = map[string][]byte{}
	}
	e.batch.Meta[metaSeen+e.id] = enc
	e.batch.OnReject = func(rejected error) map[string][]byte {
		rec := rec
		rec.Code, rec.Msg = rejectCode(rejected), rejected.Error()
		enc, _ := json.Marshal(rec)
		return map[string][]byte{metaSeen + e.id: enc}
	}
}

// decode turns a log entry into a batch. An entry that is malformed, or
// whose policy bundle is gone, becomes an empty batch with cause set: the
// revision is recorded, nothing changes, on every replica alike. err is a
// failure to reach the object store: the entry is tried again later.
func (r *Replica) decode(ctx context.Context, seq uint64, data []byte) (b datastore.Batch, pol *Policy, cause, err error) {
	m, derr := wire.Decode(data)
	if derr != nil {
		return b, nil, derr, nil
	}
	switch m.Kind {
	case wire.KindWrite:
		b.Write, _ = m.WriteRequest() // Decode checked it
	case wire.KindSchema:
		sc, err := schema.Parse([]byte(m.Schema))
		if err != nil {
			return datastore.Batch{}, nil, err, nil
		}
		b.Schema, b.Force = sc, m.Force
	case wire.KindPolicy:
		bundle, err := r.fetchPolicy(ctx, *m.Policy)
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound), errors.Is(err, errBadBundle):
			r.m.policyErrors.Inc()
			return datastore.Batch{}, nil, err, nil
		case err != nil:
			return datastore.Batch{}, nil, nil, err
		}
		pm, _ := json.Marshal(policyMeta{Revision: seq, SHA256: m.Policy.SHA256})
		b.Meta = map[string][]byte{metaPolicy: pm, metaBundle: bundle}
		pol = &Policy{SHA256: m.Policy.SHA256, Bundle: bundle}
	}
	return b, pol, nil, nil
}

// errBadBundle: the object store holds other bytes than the entry names.
var errBadBundle = errors.New("cluster: policy bundle does not match its digest")

func (r *Replica) fetchPolicy(ctx context.Context, ref wire.PolicyRef) ([]byte, error) {
	r.mu.Lock()
	obs := r.obs
	r.mu.Unlock()
	if obs == nil {
		return nil, errors.New("object store not ready")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := obs.GetBytes(ctx, ref.Object)
	if err != nil {
		return nil, fmt.Errorf("policy bundle %s: %w", ref.Object, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != ref.SHA256 || int64(len(b)) != ref.Size {
		return nil, fmt.Errorf("%w: %s", errBadBundle, ref.Object)
	}
	return b, nil
}

// policyChanged hands a new policy to the server.
func (r *Replica) policyChanged(ctx context.Context, p Policy) {
	r.log.Info("policy loaded from the cluster log", "revision", p.Revision, "sha256", p.SHA256)
	if r.cfg.OnPolicy == nil {
		return
	}
	if err := r.cfg.OnPolicy(ctx, p); err != nil {
		r.m.policyErrors.Inc()
		r.log.Error("the policy from the cluster log was refused", "revision", p.Revision, "err", err)
	}
}

// storedPolicy returns the policy reference the store holds, if any.
func (r *Replica) storedPolicy(ctx context.Context) (policyMeta, bool) {
	raw, err := r.store.ReplicaMeta(ctx, metaPolicy)
	if err != nil || raw == nil {
		return policyMeta{}, false
	}
	var pm policyMeta
	if json.Unmarshal(raw, &pm) != nil {
		return policyMeta{}, false
	}
	return pm, true
}

// housekeeping probes the log (last sequence, JetStream health) every
// second and writes snapshots.
func (r *Replica) housekeeping() {
	defer r.wg.Done()
	probe := time.NewTicker(time.Second)
	defer probe.Stop()
	var snapC <-chan time.Time
	if r.cfg.SnapshotInterval > 0 {
		// A little jitter so that replicas started together do not all
		// snapshot at once.
		t := time.NewTicker(r.cfg.SnapshotInterval + time.Duration(time.Now().UnixNano()%int64(r.cfg.SnapshotInterval/10+1)))
		defer t.Stop()
		snapC = t.C
	}
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-probe.C:
			r.probe()
		case <-snapC:
			if _, err := r.maybeSnapshot(r.ctx); err != nil && r.ctx.Err() == nil {
				r.log.Warn("snapshot", "err", err)
			}
		}
	}
}

// probe asks the log for its state: a JetStream without quorum answers
// nothing even while the connection is up.
func (r *Replica) probe() {
	r.mu.Lock()
	s, following := r.stream, r.following
	r.mu.Unlock()
	if !following || s == nil || !r.nc.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		if r.ctx.Err() == nil {
			r.setReason("JetStream does not answer: " + err.Error())
		}
		return
	}
	if reason := quorumLost(info.Cluster); reason != "" {
		r.setReason(reason)
		return
	}
	r.setReason("")
	r.seeLast(info.State.LastSeq)
}

// peerSilence is how long a copy of the log may go unseen by its leader
// before it no longer counts toward a quorum.
const peerSilence = 4 * time.Second

// quorumLost says why the log cannot take writes when its leader sees
// too few of its copies: a leader left alone may keep answering stream
// info for a long time while every write waits for a quorum that is gone.
func quorumLost(c *jetstream.ClusterInfo) string {
	if c == nil || len(c.Replicas) == 0 {
		return "" // a single copy: its leader is the quorum
	}
	if c.Leader == "" {
		return "the log has no leader"
	}
	live, total := 1, 1+len(c.Replicas)
	for _, p := range c.Replicas {
		if p != nil && p.Current && !p.Offline && p.Active < peerSilence {
			live++
		}
	}
	if live < total/2+1 {
		return fmt.Sprintf("no quorum: the log's leader sees %d of its %d copies", live, total)
	}
	return ""
}
