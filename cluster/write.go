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

	"github.com/nexuspdp/nexus/cluster/internal/wire"
	"github.com/nexuspdp/nexus/datastore"
)

// pendingWrite is a write of this replica waiting for its entry to be
// applied; the apply loop finds it by the entry's message id.
type pendingWrite struct {
	done chan struct{}
	once sync.Once
	rev  datastore.Revision
	err  error
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
// ErrUnavailable, ErrContention, ErrTooLarge, ErrNotApplied (with the
// revision), ErrClosed.
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
func (r *Replica) WriteSchema(ctx context.Context, sc *datastore.Schema, force bool) (datastore.Revision, error) {
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
// its WriteTimeout while a JetStream leader is elected.
const publishTimeout = 3 * time.Second

// submit appends payload to the log and waits until this replica applied
// it. prepare checks the write against the local store; a conditional
// write (preconditions, a schema) is published with the revision prepare
// checked it at as the expected last sequence, so that it applies to
// exactly that state: on a conflict it catches up and checks again. An
// unconditional write (touches and deletes only, a policy load) depends
// on nothing but the schema, which the apply checks again; it is
// published without an expected sequence and never conflicts.
func (r *Replica) submit(ctx context.Context, payload []byte, conditional bool, prepare func(context.Context) (datastore.Revision, error)) (datastore.Revision, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	if max := r.nc.MaxPayload(); max > 0 && int64(len(payload))+1024 > max {
		return 0, fmt.Errorf("%w: %d bytes, the log takes at most %d", ErrTooLarge, len(payload), max-1024)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	if conditional {
		// Conditional writes of one replica go one at a time: each would
		// otherwise conflict with its neighbours on every round.
		select {
		case r.condSem <- struct{}{}:
			defer func() { <-r.condSem }()
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: waiting for this replica's earlier conditional writes: %w", ErrUnavailable, ctx.Err())
		}
	}
	// One message id for every attempt: JetStream drops a copy it already
	// has, and the apply loop recognises the entry whichever attempt
	// landed.
	id := r.id + "." + strconv.FormatUint(r.msgSeq.Add(1), 10)
	p := &pendingWrite{done: make(chan struct{})}
	r.mu.Lock()
	r.pending[id] = p
	r.mu.Unlock()
	// Its client waits for this replica to apply it.
	r.gather.begin()
	defer func() {
		r.gather.end()
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
	}()
	subject, stream := r.cfg.subject(), r.cfg.streamName()
	verified, conflicts := false, 0
	for {
		select {
		case <-p.done: // an earlier attempt landed after all
			return p.rev, p.err
		default:
		}
		if _, err := r.currentStream(); err != nil {
			return 0, err
		}
		base, err := prepare(ctx)
		if err != nil {
			if verified || !refusal(err) {
				return 0, err
			}
			// This replica may be behind the log: refuse only what the
			// newest state refuses.
			last, lerr := r.lastSequence(ctx)
			if lerr != nil {
				return 0, lerr
			}
			verified = true
			if uint64(base) >= last {
				return 0, err
			}
			if werr := r.waitApplied(ctx, last); werr != nil {
				return 0, fmt.Errorf("%w: catching up with the log: %w", ErrUnavailable, werr)
			}
			continue
		}
		opts := []jetstream.PublishOpt{jetstream.WithMsgID(id), jetstream.WithExpectStream(stream)}
		if conditional {
			opts = append(opts, jetstream.WithExpectLastSequence(uint64(base)))
		}
		actx, acancel := context.WithTimeout(ctx, publishTimeout)
		ack, err := r.js.PublishMsg(actx, &nats.Msg{Subject: subject, Data: payload}, opts...)
		acancel()
		switch {
		case err == nil:
			r.seeLast(ack.Sequence)
			select {
			case <-p.done:
				return p.rev, p.err
			case <-ctx.Done():
				return datastore.Revision(ack.Sequence), fmt.Errorf("%w: revision %d (this replica is at %d)", ErrNotApplied, ack.Sequence, r.Revision())
			}
		case isConflict(err):
			r.m.conflicts.Inc()
			conflicts++
			if conflicts > r.cfg.MaxRetries {
				return 0, fmt.Errorf("%w: %d conflicts", ErrContention, conflicts)
			}
			target := wrongLastSequence(err)
			if target == 0 {
				if target, err = r.lastSequence(ctx); err != nil {
					return 0, err
				}
			}
			r.seeLast(target)
			if werr := r.waitApplied(ctx, target); werr != nil {
				return 0, fmt.Errorf("%w: catching up with the log: %w", ErrUnavailable, werr)
			}
			r.m.retries.Inc()
			verified = false
		case ctx.Err() != nil:
			select {
			case <-p.done:
				return p.rev, p.err
			default:
			}
			return 0, fmt.Errorf("%w: the log did not acknowledge the write in time; it may still apply (%w)", ErrUnavailable, err)
		case permanent(err):
			return 0, fmt.Errorf("cluster: publish: %w", err)
		default:
			// No answer (a leader election, a node going away): try again
			// with the same message id.
			r.m.retries.Inc()
			r.log.Debug("publish not acknowledged; trying again", "err", err)
			select {
			case <-ctx.Done():
			case <-p.done:
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
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
