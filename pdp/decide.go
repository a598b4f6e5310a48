package pdp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp/internal/decisionlog"
	"github.com/nexuspdp/nexus/pdp/internal/input"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
	"github.com/nexuspdp/nexus/pdp/internal/result"
)

// Header is one header a decision sets.
type Header = result.Header

// QueryParameter is one query parameter a decision sets.
type QueryParameter = result.QueryParameter

// Decision is the answer to one request: the policy's decision (allowed,
// reason, headers, status, body, dynamic metadata), its ID and how the
// decision cache answered.
type Decision struct {
	result.Decision
	// ID names the decision: in the decision log, in Envoy's dynamic
	// metadata (decision_id), in the server's log. It has a UUID's shape.
	ID string
	// Cache is CacheHit, CacheMiss or CacheDisabled (the cache is off,
	// or the entrypoint's policy can call a non-deterministic builtin).
	Cache string
	// rev is the data revision the decision was cached under (0 when it
	// did not go through the cache).
	rev datastore.Revision
}

// meta describes a check for the decision log.
type meta struct {
	subject, action, resource string
	// view is the view the input was written (pruned) for.
	view *inputView
	// envoy reads the result as opa-envoy-plugin does (result.ParseEnvoy),
	// for Envoy and forward-auth requests; else with result.Parse.
	envoy bool
	// start is when the core began, input building included (set only
	// for a decision sink).
	start time.Time
}

// Envoy decides an Envoy CheckRequest with the envoy entrypoint, on the
// opa-envoy-plugin input document built from it.
func (p *PDP) Envoy(ctx context.Context, iface string, req *authv3.CheckRequest) (Decision, error) {
	return p.envoy(ctx, iface, req, false)
}

// EnvoyDecoded is Envoy for a CheckRequest decoded from protobuf's wire
// format, as an ext_authz gRPC server receives it: proto3 decoding has
// refused every string field that is not UTF-8, so building the input
// document does not check the request's strings again.
func (p *PDP) EnvoyDecoded(ctx context.Context, iface string, req *authv3.CheckRequest) (Decision, error) {
	return p.envoy(ctx, iface, req, true)
}

func (p *PDP) envoy(ctx context.Context, iface string, req *authv3.CheckRequest, utf8Checked bool) (Decision, error) {
	h := req.GetAttributes().GetRequest().GetHttp()
	md := meta{action: h.GetMethod(), resource: h.GetPath(), envoy: true}
	opts := input.Options{SkipBody: p.cfg.SkipRequestBodyParse, UTF8Checked: utf8Checked}
	tooLarge := !p.cfg.SkipRequestBodyParse && int64(len(h.GetBody())+len(h.GetRawBody())) > p.cfg.MaxBodyBytes
	return p.decideBuilt(ctx, iface, p.cfg.EnvoyEntrypoint, md, true, func(dst []byte, w input.Writer, keep *prune.Tree) ([]byte, error) {
		if tooLarge {
			return dst, ErrTooLarge
		}
		o := opts // opts is captured by value: one allocation less
		o.Keep = keep
		if w != nil {
			o.AnyOrder = true // the engine's values
			return dst, input.WriteEnvoy(w, req, o)
		}
		return input.AppendEnvoy(dst, req, o)
	})
}

// HTTP decides a proxied HTTP request (forward auth) from source (the
// peer's address) with the envoy entrypoint, on the same input document
// as Envoy's.
func (p *PDP) HTTP(ctx context.Context, iface string, req *HTTPRequest, source string) (Decision, error) {
	md := meta{action: req.Method, resource: req.Path, envoy: true}
	opts := input.Options{SkipBody: p.cfg.SkipRequestBodyParse}
	return p.decideBuilt(ctx, iface, p.cfg.EnvoyEntrypoint, md, true, func(dst []byte, w input.Writer, keep *prune.Tree) ([]byte, error) {
		o := opts
		o.Keep = keep
		if w != nil {
			o.AnyOrder = true // the engine's values
			return dst, input.WriteHTTP(w, req, source, o)
		}
		return input.AppendHTTP(dst, req, source, o)
	})
}

// Check decides an application check with the authz entrypoint. With the
// default entrypoint, a resource or subject type the schema does not
// declare is ErrUnknownType.
func (p *PDP) Check(ctx context.Context, iface string, c *Check) (Decision, error) {
	if p.cfg.AuthzEntrypoint == DefaultAuthzEntrypoint {
		for _, f := range [2][2]string{{"resource.type", c.Resource.Type}, {"subject.type", c.Subject.Type}} {
			if !p.KnownType(f[1]) {
				err := Errorf(ErrUnknownType, "%s %q is not a type of the schema", f[0], f[1])
				p.CountError(iface, err)
				return Decision{}, err
			}
		}
	}
	md := meta{subject: c.Subject.Type + ":" + c.Subject.ID, action: c.Action, resource: c.Resource.Type + ":" + c.Resource.ID}
	doc := c.Input()
	return p.decideBuilt(ctx, iface, p.cfg.AuthzEntrypoint, md, false, func(dst []byte, _ input.Writer, keep *prune.Tree) ([]byte, error) {
		if keep == nil {
			return append(dst, doc...), nil
		}
		out, err := keep.Append(dst, doc)
		if err != nil {
			return out, fmt.Errorf("%w: %w", engine.ErrInvalidInput, err)
		}
		return out, nil
	})
}

// build writes a request's input document, pruned to keep (nil means
// everything): appended to dst as JSON text when w is nil, else through
// w, the same document either way (then dst is returned as it is).
type build func(dst []byte, w input.Writer, keep *prune.Tree) ([]byte, error)

// Budget bounds ctx by the time budget of one request that makes many
// evaluations (a batch, a listing, a search): twice Config.EvalTimeout,
// across all of them. An evaluation the budget cuts short fails with an
// error matching ErrBudgetExceeded. A request of one evaluation needs
// none: EvalTimeout bounds it.
func (p *PDP) Budget(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, 2*p.cfg.EvalTimeout, ErrBudgetExceeded)
}

// overBudget is err, marked ErrBudgetExceeded when ctx ended because its
// budget (Budget) is used up.
func overBudget(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil || errors.Is(err, ErrBudgetExceeded) || !errors.Is(context.Cause(ctx), ErrBudgetExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBudgetExceeded, err)
}

// CountError counts a request that failed (a malformed body, an
// evaluation error), and so was denied without a policy decision, and
// returns err's code. The metric label is bounded like the decisions'.
func (p *PDP) CountError(iface string, err error) string {
	code := Code(err)
	p.m.errors.WithLabelValues(iface, reasonLabel(code)).Inc()
	return code
}

// decideBuilt decides the input b writes with what the loaded policy
// reads (b gets the selection; nil means everything); values says that b
// can write it as values. If a policy is loaded meanwhile it builds
// again, so that the policy deciding always gets the input pruned for
// it. Build errors are counted as decisions.
//
// The input goes into the policy as values, without JSON text, when b
// can write it so and nothing else wants the text: the decision cache
// (keyed by it) does not take the decision, and no decision sink logs
// the input.
func (p *PDP) decideBuilt(ctx context.Context, iface, entrypoint string, md meta, values bool, b build) (Decision, error) {
	if entrypoint == Disabled {
		err := fmt.Errorf("%w: this kind of check is disabled (its entrypoint is %q)", ErrNotReady, Disabled)
		p.CountError(iface, err)
		return Decision{}, err
	}
	var bp *[]byte // the JSON's buffer, taken when the input is JSON
	var buf []byte
	defer func() {
		if bp != nil {
			p.putBuf(bp, buf)
		}
	}()
	if p.cfg.DecisionSink != nil {
		md.start = time.Now()
	}
	for attempt := 0; ; attempt++ {
		v := p.view.Load()
		var keep *prune.Tree
		if v != nil {
			keep = v.keep[entrypoint]
		}
		md.view = v
		var d Decision
		var err error
		if values && p.cfg.DecisionSink == nil && (p.cache == nil || !v.cached(entrypoint)) {
			in := p.inputs.Get().(*engine.Input)
			if _, err := b(nil, in.Writer(), keep); err != nil {
				p.inputs.Put(in)
				p.CountError(iface, err)
				return Decision{}, err
			}
			d, err = p.decide(ctx, iface, entrypoint, nil, md, nil, in)
			p.inputs.Put(in)
		} else {
			if bp == nil {
				bp = p.buf()
				buf = *bp
			}
			if buf, err = b(buf[:0], nil, keep); err != nil {
				p.CountError(iface, err)
				return Decision{}, err
			}
			var whole build
			if p.cfg.DecisionSink != nil && keep != nil {
				// OPA logs the input document the request made, not the
				// parts this policy reads.
				whole = b
			}
			d, err = p.decide(ctx, iface, entrypoint, buf, md, whole, nil)
		}
		if err != errStale {
			return d, err
		}
		if attempt == 2 {
			p.CountError(iface, err)
			return d, err
		}
	}
}

// epoch is a reading of the clock taken once: a decision's start and
// latency are time.Since(epoch), which reads the monotonic clock alone,
// where time.Now would read the wall clock too. The wall clock is read
// only for a decision that is logged.
var epoch = time.Now()

// decide evaluates entrypoint on input, through the decision cache, and
// counts, measures and logs the decision. whole, when not nil, writes the
// whole input document, unpruned, for a decision sink (nil when the
// policy saw the whole document already). It is a parameter, not a field
// of md, so that the input builder it is does not escape to the heap.
// values, when not nil, is the input instead of input, written as values;
// it bypasses the decision cache.
func (p *PDP) decide(ctx context.Context, iface, entrypoint string, input []byte, md meta, whole build, values *engine.Input) (Decision, error) {
	start := time.Since(epoch)
	d, err := p.decideUncounted(ctx, entrypoint, input, values, &md, start)
	if err == errStale {
		return d, err // the caller builds the input again
	}
	elapsed := time.Since(epoch) - start
	d.ID = p.decisionID()
	if err != nil {
		err = overBudget(ctx, err)
		d.Reason = p.CountError(iface, err)
		if d.Reason != CodeBadRequest && d.Reason != CodeCanceled {
			p.cfg.Logger.Warn("decision failed", "interface", iface, "reason", d.Reason, "err", err)
		}
	} else {
		p.m.countDecision(iface, d.Allowed, d.Reason)
	}
	p.m.observe(iface, d.Cache, elapsed)
	var began time.Time // the wall clock when the decision began, for logs
	if p.log.Enabled() || p.cfg.DecisionSink != nil {
		began = time.Now().Add(-elapsed)
	}
	if p.log.Enabled() {
		rev := d.rev
		if d.Cache == CacheDisabled {
			rev, _ = p.store.Revision(ctx)
		}
		subject := md.subject
		if subject == "" {
			subject = d.Subject // the policy says whom it identified
		}
		p.log.Emit(decisionlog.Event{
			DecisionID:     d.ID,
			Time:           began.UTC(),
			Interface:      iface,
			Subject:        subject,
			Action:         md.action,
			Resource:       md.resource,
			Allowed:        err == nil && d.Allowed,
			Reason:         d.Reason,
			PolicyRevision: *p.policyRev(),
			DataRevision:   uint64(rev),
			LatencyMicros:  float64(elapsed.Nanoseconds()) / 1e3,
			Cache:          d.Cache,
		})
	}
	if p.cfg.DecisionSink != nil {
		p.record(iface, entrypoint, input, &d, err, began, elapsed, &md, whole)
	}
	return d, err
}

// record hands the decision to the decision sink, with the whole input
// document and the result.
func (p *PDP) record(iface, entrypoint string, input []byte, d *Decision, err error, start time.Time, elapsed time.Duration, md *meta, whole build) {
	var in []byte
	if whole != nil {
		if w, err := whole(nil, nil, nil); err == nil {
			in = w // freshly written: the sink may own it
		}
	}
	if in == nil {
		in = bytes.Clone(input) // the decision's buffer goes back to its pool
	}
	r := &DecisionRecord{
		ID:           d.ID,
		Time:         start.UTC(),
		Path:         entrypoint,
		Interface:    iface,
		Input:        in,
		Revision:     *p.policyRev(),
		EvalNanos:    elapsed.Nanoseconds(),
		HandlerNanos: time.Since(md.start).Nanoseconds(),
		Cache:        d.Cache,
		Rules:        p,
	}
	if err != nil {
		r.ErrorCode, r.ErrorMessage = d.Reason, err.Error()
	} else {
		r.Result = d.Raw
	}
	p.cfg.DecisionSink.Record(r)
}

// decisionID returns a new decision ID in a UUID's shape: eight random
// bytes drawn when the PDP starts, then a counter, so that IDs are unique
// across processes and restarts without drawing randomness per decision.
func (p *PDP) decisionID() string {
	const hexDigits = "0123456789abcdef"
	var b [16]byte
	copy(b[:8], p.idPrefix[:])
	seq := p.idSeq.Add(1)
	for i := 15; i >= 8; i-- {
		b[i] = byte(seq)
		seq >>= 8
	}
	b[8] = b[8]&0x3f | 0x80 // the RFC 9562 variant
	var out [36]byte
	j := 0
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j], out[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(out[:])
}

// buf takes a buffer from the pool; putBuf returns it with b, its grown
// contents, unless b grew too big to keep.
func (p *PDP) buf() *[]byte { return p.bufs.Get().(*[]byte) }

func (p *PDP) putBuf(bp *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		p.bufs.Put(bp)
	}
}

// decideUncounted decides input, written for view md.view (nil before a
// policy is loaded), reading the result as opa-envoy-plugin does if
// md.envoy. It returns errStale if the view is no longer the loaded one
// when the decision is made. start is when the decision began, as
// time.Since(epoch): the evaluation's deadline is Config.EvalTimeout
// after it.
func (p *PDP) decideUncounted(ctx context.Context, entrypoint string, input []byte, values *engine.Input, md *meta, start time.Duration) (d Decision, err error) {
	v, envoy := md.view, md.envoy
	d = Decision{Cache: CacheDisabled}
	if !p.ready.Load() {
		return d, ErrNotReady
	}
	defer func() {
		if err == nil && p.view.Load() != v {
			d, err = Decision{Cache: d.Cache}, errStale
		}
	}()
	var key string
	cached := p.cache != nil && v.cached(entrypoint) && values == nil
	if cached {
		d.Cache = CacheMiss
		rev, err := p.store.Revision(ctx)
		if err != nil {
			return d, fmt.Errorf("pdp: data revision: %w", err)
		}
		d.rev = rev
		kp := p.buf()
		kb := strconv.AppendUint((*kp)[:0], p.gen.Load(), 36)
		kb = append(kb, '/')
		kb = strconv.AppendUint(kb, uint64(rev), 36)
		kb = append(kb, '/')
		kb = append(kb, entrypoint...)
		kb = append(kb, resultKind(envoy))
		kb = append(kb, input...)
		// The lookup does not keep its key, so it reads the buffer in
		// place; only a miss copies the key, to insert it.
		r, hit := p.cache.GetIfPresent(unsafe.String(unsafe.SliceData(kb), len(kb)))
		if !hit {
			key = string(kb)
		}
		p.putBuf(kp, kb)
		if hit {
			d.Decision, d.Cache = r, CacheHit
			return d, nil
		}
	}
	bp := p.buf()
	// EvalTimeout bounds the evaluation through the engine's watchdog,
	// without a timer per evaluation, from start: the clock is read once
	// for the deadline and the decision's latency. Every input was
	// written by this package's encoders (fuzzed to write UTF-8 JSON
	// whatever the request held) or encoding/json: the engine need not
	// scan it again.
	var deadline time.Time
	if p.cfg.EvalTimeout > 0 {
		deadline = epoch.Add(start + p.cfg.EvalTimeout)
	}
	var out []byte
	if values != nil {
		out, err = p.eng.EvalInputUntil(ctx, deadline, entrypoint, values, (*bp)[:0])
	} else {
		out, err = p.eng.EvalTrustedUntil(ctx, deadline, entrypoint, input, (*bp)[:0])
	}
	if err == nil {
		d.Decision, err = p.parseResult(out, envoy)
		if err == nil && p.cfg.DecisionSink != nil {
			d.Raw = bytes.Clone(out)
		}
	}
	p.putBuf(bp, out)
	if err != nil {
		return d, err
	}
	if cached {
		p.cache.Set(key, d.Decision)
	}
	return d, nil
}

// resultKind tells the two ways of reading a result apart in the keys of
// the decision cache and of the memo of parsed results.
func resultKind(envoy bool) byte {
	if envoy {
		return 'e'
	}
	return 'a'
}

// parseResult is result.ParseEnvoy (if envoy) or result.Parse through the
// memo of parsed results.
func (p *PDP) parseResult(out []byte, envoy bool) (result.Decision, error) {
	parse := result.Parse
	if envoy {
		parse = result.ParseEnvoy
	}
	if len(out) > maxMemoized {
		return parse(out)
	}
	kp := p.buf()
	kb := append(append((*kp)[:0], resultKind(envoy)), out...)
	defer p.putBuf(kp, kb)
	e, h := p.results.get(kb)
	if e != nil {
		return e.d, nil
	}
	d, err := parse(out)
	if err == nil {
		p.results.put(h, kb, d)
	}
	return d, err
}
