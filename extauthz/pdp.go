package extauthz

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/maypok86/otter/v2"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz/internal/decisionlog"
	"github.com/nexuspdp/nexus/extauthz/internal/prune"
	"github.com/nexuspdp/nexus/extauthz/internal/result"
)

// errUnknownType reports a resource type the schema does not declare.
var errUnknownType = errors.New("unknown resource type")

// pdp is the decision core shared by every interface.
type pdp struct {
	cfg   *Config
	eng   *engine.Engine
	store *datastore.BoltStore
	cache *otter.Cache[string, result.Decision]
	// results memoises result.Parse by the result document's bytes: most
	// results repeat (a reason, a subject), and parsing an object costs
	// more than the lookup. Decisions are never modified once parsed.
	results *otter.Cache[string, result.Decision]
	log     *decisionlog.Logger
	m       *metrics

	mu     sync.Mutex // serialises policy loads
	base   *bundle.Bundle
	gen    atomic.Uint64 // bumped on every policy load; part of the cache key
	ready  atomic.Bool
	types  atomic.Pointer[map[string]bool] // resource types of the schema
	policy atomic.Pointer[string]          // revision of the loaded policy
	view   atomic.Pointer[inputView]       // what the loaded policy reads of the input

	idPrefix string
	idSeq    atomic.Uint64
	bufs     sync.Pool
}

// meta describes a check for the decision log.
type meta struct {
	subject, action, resource string
	// view is the view the input was written (pruned) for.
	view *inputView
}

// inputView is the part of the input the loaded policy reads. Every load
// stores a new one after the engine swapped bundles, so a decision whose
// view is still the loaded one after evaluation was evaluated by the
// policy its input was pruned for.
type inputView struct {
	keep *prune.Tree // nil: the whole input
}

// errStale reports a policy load during a decision: its input was pruned
// for another policy. Callers build the input again.
var errStale = fmt.Errorf("%w: the policy changed during the decision", ErrNotReady)

type decision struct {
	result.Decision
	cache string
	// rev is the data revision the decision was cached under (0 when the
	// cache is off).
	rev datastore.Revision
}

func newPDP(cfg *Config) (*pdp, error) {
	p := &pdp{cfg: cfg, eng: cfg.Engine, store: cfg.Store, base: cfg.Policy}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	p.idPrefix = hex.EncodeToString(rnd[:]) + "-"
	p.bufs.New = func() any { b := make([]byte, 0, 1024); return &b }
	if !cfg.CacheDisabled {
		c, err := otter.New(&otter.Options[string, result.Decision]{MaximumSize: cfg.CacheSize})
		if err != nil {
			return nil, fmt.Errorf("extauthz: decision cache: %w", err)
		}
		p.cache = c
	}
	results, err := otter.New(&otter.Options[string, result.Decision]{MaximumSize: 10_000})
	if err != nil {
		return nil, fmt.Errorf("extauthz: result cache: %w", err)
	}
	p.results = results
	p.log = decisionlog.New(decisionlog.Config{Out: cfg.DecisionLog, QueueSize: cfg.DecisionLogQueue, Logger: cfg.Logger})
	m, err := newMetrics(cfg.Registerer,
		func() float64 { return float64(p.log.Emitted()) },
		func() float64 { return float64(p.log.Dropped()) })
	if err != nil {
		return nil, fmt.Errorf("extauthz: metrics: %w", err)
	}
	p.m = m
	return p, nil
}

// load (re)loads the policy with the current schema's roles and
// permissions in its data. A nil bundle reloads the current one.
func (p *pdp) load(ctx context.Context, b *bundle.Bundle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b == nil {
		b = p.base
	}
	sc, err := p.store.Schema(ctx)
	if err != nil && !errors.Is(err, datastore.ErrNoSchema) {
		return fmt.Errorf("extauthz: reading the schema: %w", err)
	}
	data, types, err := withSchema(b.Data, sc)
	if err != nil {
		return err
	}
	nb := *b
	nb.Data = data
	if err := p.eng.Load(ctx, &nb); err != nil {
		return fmt.Errorf("extauthz: loading the policy: %w", err)
	}
	p.base = b
	p.types.Store(&types)
	v := &inputView{}
	if paths, ok := b.Manifest.InputPaths(nb.Data); ok {
		v.keep = prune.New(paths)
	}
	p.view.Store(v)
	rev := b.Manifest.Revision
	p.policy.Store(&rev)
	p.gen.Add(1)
	if p.cache != nil {
		p.cache.InvalidateAll()
	}
	p.ready.Store(true)
	return nil
}

// withSchema returns data with data.nexus.roles (role to grants) and
// data.nexus.permissions (type to permission names) from sc, and each
// route rule of data.nexus.routes with its path split into "segments".
func withSchema(data []byte, sc *datastore.Schema) ([]byte, map[string]bool, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, nil, fmt.Errorf("extauthz: policy data: %w", err)
		}
	}
	nx, _ := doc["nexus"].(map[string]any)
	if routes, ok := nx["routes"].([]any); ok {
		// Split each route's path once here rather than in every evaluation.
		for _, r := range routes {
			if m, ok := r.(map[string]any); ok {
				if p, ok := m["path"].(string); ok {
					if _, has := m["segments"]; !has {
						m["segments"] = strings.Split(strings.TrimPrefix(p, "/"), "/")
					}
				}
			}
		}
		if _, has := nx["route_index"]; !has {
			if idx, ok := routeIndex(routes); ok {
				nx["route_index"] = idx
			}
		}
	}
	if sc == nil {
		out, err := json.Marshal(doc)
		return out, nil, err
	}
	if nx == nil {
		nx = map[string]any{}
		doc["nexus"] = nx
	}
	nx["roles"] = sc.RoleGrantsMap()
	perms := map[string][]string{}
	types := map[string]bool{}
	for _, t := range sc.Types() {
		types[t] = true
		perms[t] = append([]string{}, sc.Permissions(t)...)
	}
	nx["permissions"] = perms
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("extauthz: policy data: %w", err)
	}
	return out, types, nil
}

// routeIndex lists the positions of the route rules by the number of
// segments of their path and by method ("*" included), in data order, so
// that the default policy matches a request against its candidates only.
// It gives up (false) on a rule without a string method and segments.
func routeIndex(routes []any) ([]map[string][]int, bool) {
	var idx []map[string][]int
	for i, r := range routes {
		m, _ := r.(map[string]any)
		method, ok := m["method"].(string)
		if !ok {
			return nil, false
		}
		var n int
		switch segs := m["segments"].(type) {
		case []string:
			n = len(segs)
		case []any:
			n = len(segs)
		default:
			return nil, false
		}
		for len(idx) <= n {
			idx = append(idx, map[string][]int{})
		}
		idx[n][method] = append(idx[n][method], i)
	}
	return idx, true
}

// knownType reports whether the schema declares typ (true when there is
// no schema to ask).
func (p *pdp) knownType(typ string) bool {
	t := p.types.Load()
	return t == nil || *t == nil || (*t)[typ]
}

// decide evaluates entrypoint on input, through the decision cache.
func (p *pdp) decide(ctx context.Context, iface, entrypoint string, input []byte, md meta) (decision, error) {
	start := time.Now()
	d, err := p.decideUncounted(ctx, entrypoint, input, md.view)
	if err == errStale {
		return d, err // the caller builds the input again
	}
	elapsed := time.Since(start)
	if err != nil {
		code := p.countError(iface, err)
		d.Reason = code
	} else {
		res := "deny"
		if d.Allowed {
			res = "allow"
		}
		p.m.decisions.WithLabelValues(iface, res, reasonLabel(d.Reason)).Inc()
	}
	p.m.obs[[2]string{iface, d.cache}].Observe(elapsed.Seconds())
	if p.log.Enabled() {
		rev := d.rev
		if p.cache == nil {
			rev, _ = p.store.Revision(ctx)
		}
		ev := decisionlog.Event{
			DecisionID:     p.idPrefix + strconv.FormatUint(p.idSeq.Add(1), 10),
			Time:           start.UTC(),
			Interface:      iface,
			Subject:        md.subject,
			Action:         md.action,
			Resource:       md.resource,
			Allowed:        err == nil && d.Allowed,
			Reason:         d.Reason,
			PolicyRevision: *p.policyRev(),
			DataRevision:   uint64(rev),
			LatencyMicros:  float64(elapsed.Nanoseconds()) / 1e3,
			Cache:          d.cache,
		}
		p.log.Emit(ev)
	}
	return d, err
}

func (p *pdp) policyRev() *string {
	if r := p.policy.Load(); r != nil {
		return r
	}
	empty := ""
	return &empty
}

// decideBuilt decides the input build writes with what the loaded policy
// reads (build gets the selection; nil means everything). If a policy is
// loaded meanwhile it builds again, so that the policy deciding always
// gets the input pruned for it. Build errors are counted as decisions.
func (p *pdp) decideBuilt(ctx context.Context, iface, entrypoint string, md meta, build func([]byte, *prune.Tree) ([]byte, error)) (decision, error) {
	bp := p.buf()
	buf := *bp
	defer func() { p.putBuf(bp, buf) }()
	for attempt := 0; ; attempt++ {
		v := p.view.Load()
		var keep *prune.Tree
		if v != nil {
			keep = v.keep
		}
		var err error
		if buf, err = build(buf[:0], keep); err != nil {
			p.countError(iface, err)
			return decision{}, err
		}
		md.view = v
		d, err := p.decide(ctx, iface, entrypoint, buf, md)
		if err != errStale {
			return d, err
		}
		if attempt == 2 {
			p.countError(iface, err)
			return d, err
		}
	}
}

// decideDocument decides a whole input document (an application check):
// it is pruned to what the loaded policy reads.
func (p *pdp) decideDocument(ctx context.Context, iface, entrypoint string, doc []byte, md meta) (decision, error) {
	return p.decideBuilt(ctx, iface, entrypoint, md, func(dst []byte, keep *prune.Tree) ([]byte, error) {
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

// countError counts a denial for err and returns its code.
func (p *pdp) countError(iface string, err error) string {
	code, _, _ := classify(err)
	p.m.errors.WithLabelValues(iface, code).Inc()
	p.m.decisions.WithLabelValues(iface, "deny", reasonLabel(code)).Inc()
	return code
}

// buf takes a buffer from the pool; putBuf returns it with b, its grown
// contents, unless b grew too big to keep.
func (p *pdp) buf() *[]byte { return p.bufs.Get().(*[]byte) }

func (p *pdp) putBuf(bp *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		p.bufs.Put(bp)
	}
}

// decideUncounted decides input, written for view v (nil before a policy
// is loaded). It returns errStale if v is no longer the loaded view when
// the decision is made.
func (p *pdp) decideUncounted(ctx context.Context, entrypoint string, input []byte, v *inputView) (d decision, err error) {
	d = decision{cache: cacheDisabled}
	if !p.ready.Load() {
		return d, ErrNotReady
	}
	defer func() {
		if err == nil && p.view.Load() != v {
			d, err = decision{cache: d.cache}, errStale
		}
	}()
	var key string
	if p.cache != nil {
		d.cache = cacheMiss
		rev, err := p.store.Revision(ctx)
		if err != nil {
			return d, fmt.Errorf("extauthz: data revision: %w", err)
		}
		d.rev = rev
		kp := p.buf()
		kb := strconv.AppendUint((*kp)[:0], p.gen.Load(), 36)
		kb = append(kb, '/')
		kb = strconv.AppendUint(kb, uint64(rev), 36)
		kb = append(kb, '/')
		kb = append(kb, entrypoint...)
		kb = append(kb, 0)
		kb = append(kb, input...)
		// The lookup does not keep its key, so it reads the buffer in
		// place; only a miss copies the key, to insert it.
		r, hit := p.cache.GetIfPresent(unsafe.String(unsafe.SliceData(kb), len(kb)))
		if !hit {
			key = string(kb)
		}
		p.putBuf(kp, kb)
		if hit {
			d.Decision, d.cache = r, cacheHit
			return d, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.EvalTimeout)
	defer cancel()
	bp := p.buf()
	out, err := p.eng.Eval(ctx, entrypoint, input, (*bp)[:0])
	if err == nil {
		d.Decision, err = p.parseResult(out)
	}
	p.putBuf(bp, out)
	if err != nil {
		return d, err
	}
	if p.cache != nil {
		p.cache.Set(key, d.Decision)
	}
	return d, nil
}

// parseResult is result.Parse through the memo of parsed results.
func (p *pdp) parseResult(out []byte) (result.Decision, error) {
	if len(out) > 4096 {
		return result.Parse(out)
	}
	if d, ok := p.results.GetIfPresent(string(out)); ok {
		return d, nil
	}
	d, err := result.Parse(out)
	if err == nil {
		p.results.Set(string(out), d)
	}
	return d, err
}
