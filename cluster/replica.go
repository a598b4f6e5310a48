package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/nexuspdp/nexus/datastore"
)

// Replica keeps a local store in step with the cluster's log and writes
// through the log. Every method is safe for concurrent use.
type Replica struct {
	cfg   Config
	log   *slog.Logger
	store *datastore.BoltStore
	id    string // this process's replica id: message ids, logs
	nc    *nats.Conn
	js    jetstream.JetStream
	m     *metrics

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// followed: the follow loop has set up once since New.
	followed atomic.Bool

	// applied is the store's revision: the last log sequence applied.
	applied  atomic.Uint64
	notifyMu sync.Mutex
	notify   chan struct{} // closed and replaced after each apply

	// streamLast is the highest log sequence this replica knows of.
	streamLast  atomic.Uint64
	behindSince atomic.Int64 // unix nanos when applied last fell behind streamLast; 0 when caught up
	msgSeq      atomic.Uint64
	identified  bool          // the store records the log it follows (follow goroutine only)
	wake        chan struct{} // the connection came back: follow again now
	condSem     chan struct{} // one conditional write of this replica at a time
	gather      gather        // who waits for the apply loop

	mu        sync.Mutex
	stream    jetstream.Stream      // set while following
	obs       jetstream.ObjectStore // set once the bucket is known
	logID     string                // the log's identity, once known
	following bool
	attempt   context.CancelFunc       // ends the follow loop's attempt under way
	reason    string                   // why not following, or why JetStream is not answering
	diverged  error                    // set when the store cannot follow the log
	pending   map[string]*pendingWrite // by write ID
	seen      *seenTable               // applied write IDs and fences (the apply goroutine writes it)
	snapRev   datastore.Revision
	snapTime  time.Time
	rejected  uint64
	connErr   error     // the last failed connection attempt, until one succeeds
	connWarn  string    // the connection failure last logged
	connWarnT time.Time // when
}

// Policy is a policy bundle loaded through the cluster.
type Policy struct {
	// Revision is the log entry that loaded it.
	Revision datastore.Revision
	// SHA256 is the hex digest of Bundle.
	SHA256 string
	// Bundle is the bundle as given to LoadPolicy (.tar.gz).
	Bundle []byte
}

// Status is a replica's view of the cluster.
type Status struct {
	// Degraded is true while writes are refused: NATS unreachable, no
	// JetStream quorum, or the store cannot follow the log. Reads go on
	// from local data.
	Degraded bool
	// Reason says why, when Degraded.
	Reason string
	// Connected is true while the NATS connection is up.
	Connected bool
	// Applied is the store's revision: the last log entry applied.
	Applied datastore.Revision
	// StreamLast is the log's last sequence as last seen.
	StreamLast uint64
	// LagMessages is StreamLast - Applied; Lag is how long the replica
	// has been behind (0 when caught up).
	LagMessages uint64
	Lag         time.Duration
	// SnapshotRevision and SnapshotAge describe the newest snapshot in the
	// object store as last seen (zero if none).
	SnapshotRevision datastore.Revision
	SnapshotAge      time.Duration
	// Rejected counts log entries applied without effect since New.
	Rejected uint64
	// Followed is true once the replica has read the log (found or
	// created it, and set up to follow it) since New. A replica whose
	// store is empty and that never read the log has nothing to answer
	// from: it should not be ready.
	Followed bool
}

// metaKey* are the replica metadata keys in the store (ReplicaMeta).
const (
	metaStream = "cluster.stream" // the log this store follows: stream name and id
	metaPolicy = "cluster.policy" // JSON policyMeta of the policy in force
	metaBundle = "cluster.policy.bundle"
)

// lookupTimeout bounds one question to JetStream (stream info, lookup);
// pingInterval is how often the client pings its server (two unanswered
// pings end the connection).
const (
	lookupTimeout = 4 * time.Second
	pingInterval  = 2 * time.Second
)

// streamIDKey is the stream metadata key that identifies one incarnation
// of the log: a stream deleted and created again gets another id.
const streamIDKey = "nexus_log_id"

type policyMeta struct {
	Revision uint64 `json:"revision"`
	SHA256   string `json:"sha256"`
}

// New connects to NATS and starts following the cluster's log: it creates
// the stream and the object store bucket if they are missing, restores the
// newest snapshot when the store is empty or behind the log's retention,
// and applies the log from the store's revision on, in the background. It
// returns without waiting for NATS: a replica started while NATS is down
// answers reads from its store and catches up when NATS comes back (see
// Sync to wait for that).
func New(ctx context.Context, cfg Config) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rev, err := cfg.Store.Revision(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// The log holds every entry after the store's revision: applies need
	// not wait for the disk (see datastore.BoltStore.Unsync for a file
	// the operating system left torn).
	if err := cfg.Store.Unsync(ctx); errors.Is(err, errors.ErrUnsupported) {
		cfg.Logger.Info("applies wait for the disk", "cluster", cfg.Name, "why", err)
	} else if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	r := &Replica{
		cfg: cfg, log: cfg.Logger.With("cluster", cfg.Name), store: cfg.Store, id: nuid.Next(),
		notify: make(chan struct{}), wake: make(chan struct{}, 1), condSem: make(chan struct{}, 1),
		pending: map[string]*pendingWrite{}, seen: newSeenTable(), reason: "connecting to NATS",
	}
	r.applied.Store(uint64(rev))
	r.streamLast.Store(uint64(rev))
	r.m = newMetrics(r, cfg.Registerer)
	opts := []nats.Option{
		nats.Name("nexus replica " + cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		// No buffering while disconnected: a write fails at once instead
		// of waiting for a connection.
		nats.ReconnectBufSize(-1),
		nats.Timeout(2 * time.Second),
		// A server that stops answering (stalled, partitioned) is left
		// for another within seconds, not after the default 2 minutes of
		// pings.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(2),
		// A server refusing the credentials is tried again like one that
		// is down (the client gives up after two refusals by default):
		// the account or user may be fixed on the server's side.
		nats.IgnoreAuthErrorAbort(),
		nats.ConnectHandler(func(*nats.Conn) { r.connected(); r.log.Info("connected to NATS"); r.poke() }),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			r.connected()
			r.log.Info("reconnected to NATS", "url", nc.ConnectedUrlRedacted())
			r.poke()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if !r.closed.Load() {
				r.log.Warn("disconnected from NATS: writes are refused until it is back", "err", err)
			}
		}),
		// A failed attempt (the first one's TLS or authentication error
		// included, which RetryOnFailedConnect does not return) is the
		// reason Status and refused writes give.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { r.connFailed(err) }),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if sub == nil && err != nil && !nc.IsConnected() {
				r.connFailed(err)
			}
		}),
	}
	if cfg.CredentialsFile != "" {
		if err := checkCredentials(cfg.CredentialsFile); err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(cfg.CredentialsFile))
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	nc, err := nats.Connect(joinURLs(cfg.URLs), opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to NATS: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	r.nc, r.js = nc, js
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.wg.Add(2)
	go r.run()
	go r.housekeeping()
	return r, nil
}

// checkCredentials rejects a credentials file that the client would fail
// to use on every attempt: New would otherwise return a replica that
// retries for ever.
func checkCredentials(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("cluster: Config.CredentialsFile: %w", err)
	}
	tok, _ := jwt.ParseDecoratedJWT(b)
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		return fmt.Errorf("cluster: Config.CredentialsFile %s: no user JWT in it (want a credentials file as nsc writes it): %w", path, err)
	}
	if _, err := jwt.ParseDecoratedUserNKey(b); err != nil {
		return fmt.Errorf("cluster: Config.CredentialsFile %s: no user nkey seed in it: %w", path, err)
	}
	if uc.Expires != 0 && time.Unix(uc.Expires, 0).Before(time.Now()) {
		return fmt.Errorf("cluster: Config.CredentialsFile %s: the user JWT expired at %s", path, time.Unix(uc.Expires, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func joinURLs(us []string) string {
	s := ""
	for i, u := range us {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

// poke wakes the follow loop (after a reconnect): an attempt to set up
// that still waits for an answer on the old connection starts again on
// the new one.
func (r *Replica) poke() {
	r.mu.Lock()
	if !r.following && r.attempt != nil {
		r.attempt()
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Close stops following the log and closes the NATS connection. Writes in
// flight fail with ErrClosed. It does not close the store.
func (r *Replica) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cancel()
	r.nc.Close()
	r.wg.Wait()
	r.mu.Lock()
	for id, p := range r.pending {
		p.finish(0, ErrClosed)
		delete(r.pending, id)
	}
	r.mu.Unlock()
	return nil
}

// Revision returns the revision of the local store: the last log entry
// applied.
func (r *Replica) Revision() datastore.Revision { return datastore.Revision(r.applied.Load()) }

// waitChan returns a channel closed at the next apply.
func (r *Replica) waitChan() <-chan struct{} {
	r.notifyMu.Lock()
	defer r.notifyMu.Unlock()
	return r.notify
}

func (r *Replica) signal() {
	r.notifyMu.Lock()
	close(r.notify)
	r.notify = make(chan struct{})
	r.notifyMu.Unlock()
}

// setApplied records an applied revision and wakes waiters.
func (r *Replica) setApplied(rev uint64) {
	r.applied.Store(rev)
	r.seeLast(rev)
	if rev >= r.streamLast.Load() {
		r.behindSince.Store(0)
	}
	r.signal()
}

// seeLast records that the log holds at least seq.
func (r *Replica) seeLast(seq uint64) {
	for {
		cur := r.streamLast.Load()
		if seq <= cur {
			break
		}
		if r.streamLast.CompareAndSwap(cur, seq) {
			break
		}
	}
	if r.streamLast.Load() > r.applied.Load() {
		r.behindSince.CompareAndSwap(0, time.Now().UnixNano())
	}
}

// WaitRevision waits until this replica has applied min, at most
// Config.MaxWait or until ctx ends. It fails with a *RevisionError
// (ErrRevisionTimeout) if the replica is still behind: a check that
// carried min as its consistency token must then fail closed.
func (r *Replica) WaitRevision(ctx context.Context, min datastore.Revision) error {
	if r.applied.Load() >= uint64(min) {
		return nil
	}
	if r.closed.Load() {
		return ErrClosed
	}
	r.gather.begin()
	defer r.gather.end()
	t := time.NewTimer(r.cfg.MaxWait)
	defer t.Stop()
	for {
		wait := r.waitChan()
		have := r.applied.Load()
		if have >= uint64(min) {
			return nil
		}
		select {
		case <-wait:
		case <-t.C:
			return r.revisionError(min)
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", r.revisionError(min), ctx.Err())
		case <-r.ctx.Done():
			return ErrClosed
		}
	}
}

func (r *Replica) revisionError(min datastore.Revision) *RevisionError {
	st := r.Status()
	e := &RevisionError{Want: min, Have: st.Applied, Reason: st.Reason}
	if e.Reason == "" && uint64(min) > st.StreamLast {
		e.Reason = fmt.Sprintf("the log's last entry is %d", st.StreamLast)
	}
	return e
}

// Sync waits until this replica has applied every entry the log held when
// Sync asked it: after it returns, reads on this replica see every write
// acknowledged anywhere before the call. While the replica cannot ask the
// log (it is starting, or NATS is unreachable) Sync waits for it; when
// ctx ends first it fails with ErrUnavailable, or as WaitRevision does if
// the replica was still applying (without MaxWait's bound).
func (r *Replica) Sync(ctx context.Context) error {
	for {
		last, err := r.lastSequence(ctx)
		if err == nil {
			return r.waitApplied(ctx, last)
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-r.ctx.Done():
			return ErrClosed
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitApplied waits for rev until ctx ends.
func (r *Replica) waitApplied(ctx context.Context, rev uint64) error {
	if r.applied.Load() >= rev {
		return nil
	}
	r.gather.begin()
	defer r.gather.end()
	for {
		wait := r.waitChan()
		if r.applied.Load() >= rev {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", r.revisionError(datastore.Revision(rev)), ctx.Err())
		case <-r.ctx.Done():
			return ErrClosed
		}
	}
}

// lastSequence asks the log for its last sequence.
func (r *Replica) lastSequence(ctx context.Context) (uint64, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	s, err := r.currentStream()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: stream info: %w", ErrUnavailable, err)
	}
	r.seeLast(info.State.LastSeq)
	return info.State.LastSeq, nil
}

// currentStream returns the stream while the replica follows the log.
func (r *Replica) currentStream() (jetstream.Stream, error) {
	if !r.nc.IsConnected() {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, r.notConnected())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.diverged != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, r.diverged)
	}
	if !r.following || r.stream == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnavailable, r.reason)
	}
	return r.stream, nil
}

// Status reports the replica's view of the cluster.
func (r *Replica) Status() Status {
	applied, last := r.applied.Load(), r.streamLast.Load()
	st := Status{
		Connected:  r.nc.IsConnected(),
		Followed:   r.followed.Load(),
		Applied:    datastore.Revision(applied),
		StreamLast: last,
	}
	if last > applied {
		st.LagMessages = last - applied
		if since := r.behindSince.Load(); since != 0 {
			st.Lag = time.Since(time.Unix(0, since))
		}
	}
	r.mu.Lock()
	st.SnapshotRevision = r.snapRev
	if !r.snapTime.IsZero() {
		st.SnapshotAge = time.Since(r.snapTime)
	}
	st.Rejected = r.rejected
	switch {
	case r.closed.Load():
		st.Degraded, st.Reason = true, "closed"
	case !st.Connected:
		st.Degraded, st.Reason = true, r.notConnectedLocked().Error()
	case r.diverged != nil:
		st.Degraded, st.Reason = true, r.diverged.Error()
	case !r.following || r.reason != "":
		st.Degraded, st.Reason = true, r.reason
	}
	r.mu.Unlock()
	return st
}

// Policy returns the policy in force on this replica: the last one loaded
// through the cluster that it applied (ErrNoPolicy if none).
func (r *Replica) Policy(ctx context.Context) (Policy, error) {
	raw, err := r.store.ReplicaMeta(ctx, metaPolicy)
	if err != nil {
		return Policy{}, fmt.Errorf("cluster: %w", err)
	}
	if raw == nil {
		return Policy{}, ErrNoPolicy
	}
	var pm policyMeta
	if err := json.Unmarshal(raw, &pm); err != nil {
		return Policy{}, fmt.Errorf("cluster: stored policy reference: %w", err)
	}
	b, err := r.store.ReplicaMeta(ctx, metaBundle)
	if err != nil {
		return Policy{}, fmt.Errorf("cluster: %w", err)
	}
	return Policy{Revision: datastore.Revision(pm.Revision), SHA256: pm.SHA256, Bundle: b}, nil
}

// connected forgets the last connection failure.
func (r *Replica) connected() {
	r.mu.Lock()
	r.connErr, r.connWarn, r.connWarnT = nil, "", time.Time{}
	r.mu.Unlock()
}

// connFailed records a failed connection attempt and logs it: the first
// after a connection, then one that differs from the failure logged last
// at most every 10s (attempts repeat every 250ms, alternating between
// servers).
func (r *Replica) connFailed(err error) {
	if err == nil || r.closed.Load() {
		return
	}
	r.mu.Lock()
	r.connErr = err
	warn := r.connWarnT.IsZero() || (err.Error() != r.connWarn && time.Since(r.connWarnT) >= 10*time.Second)
	if warn {
		r.connWarn, r.connWarnT = err.Error(), time.Now()
	}
	r.mu.Unlock()
	if warn {
		r.log.Warn("cannot connect to NATS; trying again", "err", err)
	}
}

// notConnected says why the connection is down: its state and the last
// failed attempt (a TLS or authentication refusal, a server that does not
// answer), wrapped.
func (r *Replica) notConnected() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notConnectedLocked()
}

func (r *Replica) notConnectedLocked() error {
	if last := r.nc.LastError(); last != nil {
		// A failure after the connection was made (the handshake, the
		// credentials) reaches no callback: the client keeps it only
		// until its next attempt, so it is kept here until a connection
		// succeeds.
		r.connErr = last
	}
	cause := r.connErr
	if cause == nil {
		return fmt.Errorf("not connected to NATS (%s)", r.nc.Status())
	}
	return fmt.Errorf("not connected to NATS (%s): %w", r.nc.Status(), cause)
}

// setFollowing records whether the follow loop runs, and why not.
func (r *Replica) setFollowing(on bool, s jetstream.Stream, why error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.following, r.stream = on, s
	switch {
	case on:
		r.reason, r.diverged = "", nil
		r.followed.Store(true)
	case why != nil:
		r.reason = why.Error()
		if errors.Is(why, ErrDiverged) {
			r.diverged = why
		}
	default:
		r.reason = "not following the log"
	}
}

// setReason records that JetStream does not answer (reason != "") or
// answers again ("").
func (r *Replica) setReason(reason string) {
	r.mu.Lock()
	if r.following {
		r.reason = reason
	}
	r.mu.Unlock()
}
