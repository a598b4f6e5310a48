package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster/internal/wire"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// pendingWrite is a write of this replica waiting for its entry to be
// applied; the apply loop finds it by the entry's message id.
type pendingWrite struct {
	msgID string // this attempt's message id
	done  chan struct{}
	once  sync.Once
	rev   datastore.Revision
	err   error
}

func (p *pendingWrite) finish(rev datastore.Revision, err error) {
	p.once.Do(func() {
		p.rev, p.err = rev, err
		close(p.done)
	})
}

// Write writes relationships through the log: touches, deletes and
// preconditions with the semantics of datastore.Store.Write. It returns
// the entry's revision once this replica applied it. Errors: those of
// datastore.Write (ErrPreconditionFailed, ErrInvalidTuple, ErrNoSchema,
// checked against the newest state this replica can reach),
// ErrUnavailable (not written, and never will be), ErrOutcomeUnknown
// (perhaps written: retry with the same write ID, api.WithWriteID, to
// learn it), ErrContention, ErrTooLarge, ErrClosed.
func (r *Replica) Write(ctx context.Context, req datastore.WriteRequest) (datastore.Revision, error) {
	payload, err := wire.Write(r.id, req)
	if err != nil {
		return 0, fmt.Errorf("cluster: encode write: %w", err)
	}
	return r.submit(ctx, payload, len(req.Preconditions) > 0, func(ctx context.Context) (datastore.Revision, error) {
		return r.store.CheckWrite(ctx, req)
	})
}

// WriteSchema writes a schema through the log, with the semantics of
// datastore.Store.WriteSchema (an *OrphanError unless force). It returns
// the entry's revision once this replica applied it.
func (r *Replica) WriteSchema(ctx context.Context, sc *schema.Schema, force bool) (datastore.Revision, error) {
	if sc == nil {
		return 0, fmt.Errorf("%w: nil schema", datastore.ErrInvalidSchema)
	}
	payload, err := wire.Schema(r.id, sc, force)
	if err != nil {
		return 0, fmt.Errorf("cluster: encode schema: %w", err)
	}
	return r.submit(ctx, payload, true, func(ctx context.Context) (datastore.Revision, error) {
		return r.store.CheckSchema(ctx, sc, force)
	})
}

// LoadPolicy puts a policy bundle (.tar.gz, checked by the caller) in the
// object store and appends its load to the log. Every replica applies it
// in log order and hands it to its Config.OnPolicy, this one before
// LoadPolicy returns the entry's revision.
func (r *Replica) LoadPolicy(ctx context.Context, bundle []byte) (datastore.Revision, error) {
	if _, err := r.currentStream(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	sum := sha256.Sum256(bundle)
	ref := wire.PolicyRef{Object: "policy/" + hex.EncodeToString(sum[:]), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(bundle))}
	r.mu.Lock()
	obs := r.obs
	r.mu.Unlock()
	if _, err := obs.GetInfo(ctx, ref.Object); errors.Is(err, jetstream.ErrObjectNotFound) {
		if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: ref.Object, Description: "nexus policy bundle"}, bytes.NewReader(bundle)); err != nil {
			return 0, fmt.Errorf("%w: put policy bundle: %w", ErrUnavailable, err)
		}
	} else if err != nil {
		return 0, fmt.Errorf("%w: policy bundle: %w", ErrUnavailable, err)
	}
	payload, err := wire.Policy(r.id, ref)
	if err != nil {
		return 0, fmt.Errorf("cluster: encode policy: %w", err)
	}
	return r.submit(ctx, payload, false, func(ctx context.Context) (datastore.Revision, error) {
		return r.store.Revision(ctx)
	})
}

// publishTimeout bounds one publish attempt; a write makes several within
// its deadline while a JetStream leader is elected.
const publishTimeout = 2 * time.Second

// submit appends payload to the log and waits until this replica applied
// it. prepare checks the write against the local store; a conditional
// write (preconditions, a schema) is published with the revision prepare
// checked it at as the expected last sequence, so that it applies to
// exactly that state: on a conflict it catches up and checks again. An
// unconditional write (touches and deletes only, a policy load) depends
// on nothing but the schema, which the apply checks again; it is
// published without an expected sequence and never conflicts.
//
// Every write has an ID (the caller's, api.WithWriteID, or a new one) and
// a deadline, deadlineShare of its timeout after it starts; both travel as
// headers. Every replica skips an entry the log took after its deadline,
// an entry whose ID it applied within SeenWindow, and an entry fenced
// before it landed. The answer is true by construction: written at a
// revision (applied here); ErrUnavailable only when the write never went
// out, or went out and was fenced or expired; ErrOutcomeUnknown otherwise.
func (r *Replica) submit(ctx context.Context, payload []byte, conditional bool, prepare func(context.Context) (datastore.Revision, error)) (rev datastore.Revision, err error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	defer func() { r.countOutcome(err) }()
	defer func() {
		// The apply loop tells writers of their entries just before it
		// publishes the revision: a written answer waits for that, so that
		// Revision() on this replica is never behind a write it answered.
		if err == nil && rev > 0 {
			_ = r.waitApplied(r.ctx, uint64(rev)) // only ErrClosed: the write stands
		}
	}()
	if max := r.nc.MaxPayload(); max > 0 && int64(len(payload))+1024 > max {
		return 0, fmt.Errorf("%w: %d bytes, the log takes at most %d", ErrTooLarge, len(payload), max-1024)
	}
	start := time.Now()
	timeout := r.cfg.WriteTimeout
	if d, ok := ctx.Deadline(); ok && d.Sub(start) < timeout {
		timeout = d.Sub(start)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline := start.Add(time.Duration(float64(timeout) * deadlineShare))
	id, fresh := api.WriteID(ctx)
	if id == "" {
		id, fresh = r.id+"."+strconv.FormatUint(r.msgSeq.Add(1), 10), true
	}
	if rec, ok := r.seenRecord(id); ok {
		return rec.outcome() // a retry: the first attempt's answer
	}
	msgID := id + "@" + strconv.FormatInt(deadline.UnixNano(), 10)
	p, owner := r.register(id, msgID)
	if !owner {
		// The same write is under way on this replica: its answer.
		select {
		case <-p.done:
			return p.rev, p.err
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: write %s: the same write is still under way", ErrOutcomeUnknown, id)
		}
	}
	// Its client waits for this replica to apply it.
	r.gather.begin()
	defer func() {
		r.gather.end()
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
	}()
	pctx, pcancel := context.WithDeadline(ctx, deadline)
	defer pcancel()
	rev, sent, err := r.publish(pctx, ctx, p, id, msgID, deadline, payload, conditional, prepare)
	switch {
	case err == nil:
		return rev, nil
	case !sent:
		return r.earlierAttempt(id, fresh, err)
	case !errors.Is(err, errUnresolved):
		return rev, err
	}
	rev, err = r.resolve(ctx, p, id, msgID, err)
	if err != nil && !errors.Is(err, ErrOutcomeUnknown) && !fresh {
		return r.earlierAttempt(id, fresh, err)
	}
	return rev, err
}

// earlierAttempt answers a write whose own attempt is known not to be
// written (err): with an ID a client gave (a retry), an earlier attempt
// under the same ID, made here or on another replica, may have reached
// the log and not yet been applied here. Unless that attempt's outcome is
// known (applied here), the answer is then unknown, never "not written".
func (r *Replica) earlierAttempt(id string, fresh bool, err error) (datastore.Revision, error) {
	if fresh || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrClosed) {
		return 0, err
	}
	if rec, ok := r.seenRecord(id); ok {
		return rec.outcome()
	}
	if refusal(err) {
		// Refused by the log's newest state, which this replica applied
		// first: an earlier attempt of the same write never applies either.
		// A conditional one expects a revision; at the newest it was
		// refused alike, and an older one the log refuses.
		return 0, err
	}
	return 0, fmt.Errorf("%w: write %s: this attempt was not written, and an earlier attempt with the same ID may still apply (%v)", ErrOutcomeUnknown, id, err)
}

// errUnresolved: the write went out and its outcome is still to learn.
var errUnresolved = errors.New("cluster: the log did not acknowledge the write before its deadline")

// publish publishes the write until its deadline (pctx): sent says
// whether any attempt may have reached the log.
func (r *Replica) publish(pctx, ctx context.Context, p *pendingWrite, id, msgID string, deadline time.Time, payload []byte, conditional bool, prepare func(context.Context) (datastore.Revision, error)) (rev datastore.Revision, sent bool, err error) {
	if conditional {
		// Conditional writes of one replica go one at a time: each would
		// otherwise conflict with its neighbours on every round.
		select {
		case r.condSem <- struct{}{}:
			defer func() { <-r.condSem }()
		case <-pctx.Done():
			return 0, false, fmt.Errorf("%w: waiting for this replica's earlier conditional writes: %w", ErrUnavailable, pctx.Err())
		}
	}
	subject, stream := r.cfg.subject(), r.cfg.streamName()
	hdr := nats.Header{}
	hdr.Set(hdrWriteID, id)
	hdr.Set(hdrDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	verified, conflicts := false, 0
	var last error
	// notSent: what to answer when the write never went out.
	notSent := func(err error) (datastore.Revision, bool, error) {
		if sent {
			if refusal(err) {
				return 0, true, fmt.Errorf("%w: %w", errUnresolved, err)
			}
			return 0, true, fmt.Errorf("%w: %v", errUnresolved, err)
		}
		return 0, false, err
	}
	for {
		select {
		case <-p.done: // an earlier attempt landed after all
			return p.rev, sent, p.err
		default:
		}
		if pctx.Err() != nil {
			if last == nil {
				last = pctx.Err()
			}
			return notSent(fmt.Errorf("%w: write %s not acknowledged before its deadline: %v", ErrUnavailable, id, last))
		}
		if _, err := r.currentStream(); err != nil {
			return notSent(err)
		}
		base, err := prepare(pctx)
		if err != nil {
			if ctx.Err() == nil && pctx.Err() != nil {
				return notSent(fmt.Errorf("%w: %w", ErrUnavailable, err))
			}
			if verified || !refusal(err) {
				return notSent(err)
			}
			// This replica may be behind the log: refuse only what the
			// newest state refuses.
			lastSeq, lerr := r.lastSequence(pctx)
			if lerr != nil {
				return notSent(lerr)
			}
			verified = true
			if uint64(base) >= lastSeq {
				return notSent(err)
			}
			if werr := r.waitApplied(pctx, lastSeq); werr != nil {
				return notSent(fmt.Errorf("%w: catching up with the log: %w", ErrUnavailable, werr))
			}
			continue
		}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(msgID), jetstream.WithExpectStream(stream)}
		if conditional {
			opts = append(opts, jetstream.WithExpectLastSequence(uint64(base)))
		}
		actx, acancel := context.WithTimeout(pctx, publishTimeout)
		ack, err := r.js.PublishMsg(actx, &nats.Msg{Subject: subject, Data: payload, Header: hdr}, opts...)
		acancel()
		if err == nil || !errors.Is(err, jetstream.ErrNoStreamResponse) && !isConflict(err) && !permanent(err) {
			// It may have reached the log. (A conflict, a refusal and no
			// responder are answers that it did not.)
			sent = true
		}
		switch {
		case err == nil:
			r.seeLast(ack.Sequence)
			select {
			case <-p.done:
				return p.rev, true, p.err
			case <-ctx.Done():
				return datastore.Revision(ack.Sequence), true, fmt.Errorf("%w: %w: revision %d (this replica is at %d)", ErrOutcomeUnknown, ErrNotApplied, ack.Sequence, r.Revision())
			}
		case isConflict(err):
			// The log refused it: this attempt is not in the log.
			r.m.conflicts.Inc()
			conflicts++
			if conflicts > r.cfg.MaxRetries {
				return notSent(fmt.Errorf("%w: %d conflicts", ErrContention, conflicts))
			}
			target := wrongLastSequence(err)
			if target == 0 {
				if target, err = r.lastSequence(pctx); err != nil {
					return notSent(err)
				}
			}
			r.seeLast(target)
			if werr := r.waitApplied(pctx, target); werr != nil {
				return notSent(fmt.Errorf("%w: catching up with the log: %w", ErrUnavailable, werr))
			}
			r.m.retries.Inc()
			verified = false
		case permanent(err):
			return notSent(fmt.Errorf("cluster: publish: %w", err))
		default:
			// No answer (a leader election, a node going away): try again
			// with the same message id.
			last = err
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				last = fmt.Errorf("no JetStream leader answers for the log: %w", err)
			}
			r.m.retries.Inc()
			r.log.Debug("publish not acknowledged; trying again", "err", err)
			select {
			case <-pctx.Done():
			case <-p.done:
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// resolve learns the outcome of a write that went out but was not seen
// applied before its deadline: it appends a fence for the write's message
// id and applies the log up to the fence. The write applied before the
// fence, or it never will.
func (r *Replica) resolve(ctx context.Context, p *pendingWrite, id, msgID string, cause error) (datastore.Revision, error) {
	unknown := func(err error) (datastore.Revision, error) {
		return 0, fmt.Errorf("%w: write %s: %w (%v)", ErrOutcomeUnknown, id, err, cause)
	}
	fence, err := wire.Fence(r.id, msgID)
	if err != nil {
		return unknown(err)
	}
	var seq uint64
	for {
		select {
		case <-p.done:
			return p.rev, p.err
		default:
		}
		if ctx.Err() != nil {
			return unknown(errors.New("the log did not take its fence in time"))
		}
		actx, acancel := context.WithTimeout(ctx, publishTimeout)
		ack, err := r.js.PublishMsg(actx, &nats.Msg{Subject: r.cfg.subject(), Data: fence},
			jetstream.WithMsgID("fence:"+msgID), jetstream.WithExpectStream(r.cfg.streamName()))
		acancel()
		if err == nil {
			seq = ack.Sequence
			break
		}
		select {
		case <-ctx.Done():
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.seeLast(seq)
	if err := r.waitApplied(ctx, seq); err != nil {
		return unknown(fmt.Errorf("fenced at revision %d, not applied here yet: %w", seq, err))
	}
	select {
	case <-p.done:
		return p.rev, p.err
	default:
	}
	if refusal(cause) {
		return 0, cause // the newest state refuses it, and the earlier attempt is void
	}
	return 0, fmt.Errorf("%w: write %s was not written: fenced at revision %d (%v)", ErrUnavailable, id, seq, cause)
}

// register records a write waiting for its entry; owner is false when
// the same write ID is already under way here (p is then that write's).
func (r *Replica) register(id, msgID string) (p *pendingWrite, owner bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pending[id]; p != nil {
		return p, false
	}
	p = &pendingWrite{done: make(chan struct{}), msgID: msgID}
	r.pending[id] = p
	return p, true
}

// seenRecord looks a write ID up in the applied table.
func (r *Replica) seenRecord(id string) (seenRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		return seenRecord{}, false
	}
	rec, ok := r.seen.seen[id]
	return rec, ok
}

// countOutcome counts a write's answer.
func (r *Replica) countOutcome(err error) {
	o := "written"
	switch {
	case err == nil:
	case errors.Is(err, ErrOutcomeUnknown):
		o = "unknown"
	case errors.Is(err, datastore.ErrBatchRejected), refusal(err):
		o = "refused"
	default:
		o = "not_written"
	}
	r.m.outcomes.WithLabelValues(o).Inc()
}

// refusal reports whether err is the store refusing the write, which a
// newer state might accept.
func refusal(err error) bool {
	return errors.Is(err, datastore.ErrPreconditionFailed) || errors.Is(err, datastore.ErrInvalidTuple) ||
		errors.Is(err, datastore.ErrNoSchema) || errors.Is(err, datastore.ErrSchemaOrphans)
}

func isConflict(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// wrongLastSequence reads the log's last sequence from a conflict
// ("wrong last sequence: 42"); 0 if it does not say.
func wrongLastSequence(err error) uint64 {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return 0
	}
	_, n, ok := strings.Cut(ae.Description, ": ")
	if !ok {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(n), 10, 64)
	return v
}

// permanent reports a JetStream refusal that trying again will not change
// (a message too large, a stream of another name, a bad request).
func permanent(err error) bool {
	var ae *jetstream.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum, jetstream.JSErrCodeBadRequest:
		return true
	}
	return ae.Code == 400
}
