package pdp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/maypok86/otter/v2"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp/internal/decisionlog"
	"github.com/nexuspdp/nexus/pdp/internal/prune"
	"github.com/nexuspdp/nexus/pdp/internal/result"
)

// Disabled is the entrypoint value that turns a family of checks off: a
// bundle need not define it, and its checks answer ErrNotReady.
const Disabled = "-"

// ErrNoEntrypoint reports a bundle that lacks an entrypoint the server is
// configured to evaluate.
var ErrNoEntrypoint = errors.New("pdp: the bundle lacks a configured entrypoint")

// ErrBadPolicyData reports a bundle whose data nexus reads (data.nexus,
// such as its route rules) is not well formed.
var ErrBadPolicyData = errors.New("pdp: the policy's data is not valid")

// PDP is the decision core shared by every transport. Its methods are safe
// for concurrent use.
type PDP struct {
	cfg   Config
	eng   *engine.Engine
	store Store
	cache *otter.Cache[string, result.Decision]
	// results memoises result.Parse by the result document's bytes.
	results *resultMemo
	log     *decisionlog.Logger
	m       *metrics

	mu     sync.Mutex // serialises policy loads
	base   *bundle.Bundle
	gen    atomic.Uint64 // bumped on every policy load; part of the cache key
	ready  atomic.Bool
	types  atomic.Pointer[map[string]bool] // resource types of the schema
	table  atomic.Pointer[builtins.Table]  // the loaded route rules and conditions (nil without data.nexus)
	policy atomic.Pointer[string]          // revision of the loaded policy
	view   atomic.Pointer[inputView]       // what the loaded policy reads of the input

	idPrefix [8]byte // random; the version-4 nibble set
	idSeq    atomic.Uint64
	bufs     sync.Pool
	inputs   sync.Pool // *engine.Input
}

// inputView is the part of the input the loaded policy reads. Every load
// stores a new one after the engine swapped bundles, so a decision whose
// view is still the loaded one after evaluation was evaluated by the
// policy its input was pruned for.
type inputView struct {
	// keep is, for each entrypoint the checks evaluate, the part of the
	// input the rules it reaches read; an entrypoint without one (or a
	// nil tree) gets the whole input.
	keep map[string]*prune.Tree
	// uncached lists the entrypoints whose decisions bypass the decision
	// cache: their policy can call a non-deterministic builtin.
	uncached []string
	// logRules lists the decision log's mask and drop entrypoints the
	// bundle has.
	logRules []string
}

// has reports whether the view's bundle has the log rule entrypoint.
func (v *inputView) has(entrypoint string) bool { return slices.Contains(v.logRules, entrypoint) }

// cached reports whether decisions of entrypoint may go through the
// decision cache under this view.
func (v *inputView) cached(entrypoint string) bool {
	return v != nil && (len(v.uncached) == 0 || !slices.Contains(v.uncached, entrypoint))
}

// New validates cfg, loads its policy (with the schema's roles and
// permissions in its data) and returns a PDP ready to decide.
func New(ctx context.Context, cfg Config) (*PDP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &PDP{cfg: cfg, eng: cfg.Engine, store: cfg.Store}
	_, _ = rand.Read(p.idPrefix[:])
	p.idPrefix[6] = p.idPrefix[6]&0x0f | 0x40
	p.bufs.New = func() any { b := make([]byte, 0, 1024); return &b }
	p.inputs.New = func() any { return new(engine.Input) }
	if !cfg.CacheDisabled {
		c, err := otter.New(&otter.Options[string, result.Decision]{MaximumSize: cfg.CacheSize, Executor: inline})
		if err != nil {
			return nil, fmt.Errorf("pdp: decision cache: %w", err)
		}
		p.cache = c
	}
	p.results = newResultMemo()
	p.log = decisionlog.New(decisionlog.Config{Out: cfg.DecisionLog, QueueSize: cfg.DecisionLogQueue, Logger: cfg.Logger})
	m, err := newMetrics(cfg.Registerer,
		func() float64 { return float64(p.log.Emitted()) },
		func() float64 { return float64(p.log.Dropped()) })
	if err != nil {
		return nil, fmt.Errorf("pdp: metrics: %w", err)
	}
	p.m = m
	if err := p.Load(ctx, cfg.Policy); err != nil {
		_ = p.log.Close(ctx)
		return nil, err
	}
	return p, nil
}

// Load swaps in bundle b with the current schema's roles and permissions
// in its data; nil reloads the current bundle (after a schema change). A
// bundle that lacks a configured entrypoint or fails to load is refused
// and the previous policy keeps serving. In-flight decisions finish on the
// policy they started with. A configured entrypoint whose policy can call
// a non-deterministic builtin (or whose bundle does not say) bypasses the
// decision cache, unless Config.CacheNondeterministic; loading a new
// bundle logs which builtins made it so.
func (p *PDP) Load(ctx context.Context, b *bundle.Bundle) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b == nil {
		b = p.base
	}
	fresh := b != p.base // not a reload after a schema change
	if err := p.CheckBundle(b); err != nil {
		return err
	}
	sc, err := p.store.Schema(ctx)
	if err != nil && !errors.Is(err, datastore.ErrNoSchema) {
		return fmt.Errorf("pdp: reading the schema: %w", err)
	}
	ld, err := withSchema(b.Data, sc)
	if err != nil {
		return err
	}
	nb := *b
	nb.Data = ld.data
	if err := p.eng.Load(ctx, &nb); err != nil {
		if errors.Is(err, engine.ErrInvalidBundle) && !errors.Is(err, bundle.ErrInvalid) {
			// The bundle's fault, not the server's: a client error.
			return fmt.Errorf("pdp: loading the policy: %w: %w", bundle.ErrInvalid, err)
		}
		return fmt.Errorf("pdp: loading the policy: %w", err)
	}
	p.base = b
	p.types.Store(&ld.types)
	p.table.Store(ld.table)
	v := &inputView{uncached: p.uncached(&b.Manifest, fresh)}
	for _, ep := range []string{p.cfg.MaskDecision, p.cfg.DropDecision} {
		if slices.Contains(b.Manifest.Entrypoints, ep) {
			v.logRules = append(v.logRules, ep)
		}
	}
	for _, ep := range []string{p.cfg.EnvoyEntrypoint, p.cfg.AuthzEntrypoint} {
		if paths, ok := b.Manifest.InputPathsFor(ep, nb.Data); ok && ep != Disabled {
			if v.keep == nil {
				v.keep = map[string]*prune.Tree{}
			}
			v.keep[ep] = prune.New(paths)
		}
	}
	if fresh {
		p.cfg.Logger.Info("policy loaded", "revision", b.Manifest.Revision)
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

// CheckBundle reports whether b could be loaded as far as can be told
// without loading it: it has every configured entrypoint
// (ErrNoEntrypoint otherwise).
func (p *PDP) CheckBundle(b *bundle.Bundle) error {
	for _, ep := range []string{p.cfg.EnvoyEntrypoint, p.cfg.AuthzEntrypoint} {
		if ep != Disabled && !slices.Contains(b.Manifest.Entrypoints, ep) {
			return fmt.Errorf("%w: %q is not among the bundle's entrypoints %q (compile the policy with it, or configure the entrypoint the policy has; %q disables one)",
				ErrNoEntrypoint, ep, b.Manifest.Entrypoints, Disabled)
		}
	}
	return nil
}

// uncached returns the configured entrypoints of m whose decisions must
// bypass the decision cache: those whose policy can call a
// non-deterministic builtin, or whose manifest does not say, unless
// Config.CacheNondeterministic. With logIt it says so in the log.
func (p *PDP) uncached(m *bundle.Manifest, logIt bool) []string {
	if p.cache == nil {
		return nil
	}
	var out []string
	eps := []string{p.cfg.EnvoyEntrypoint, p.cfg.AuthzEntrypoint}
	for i, ep := range eps {
		if ep == Disabled || slices.Contains(eps[:i], ep) {
			continue
		}
		names, known := m.Nondeterministic(ep)
		if known && len(names) == 0 {
			continue
		}
		logger := p.cfg.Logger
		switch {
		case !logIt:
		case p.cfg.CacheNondeterministic && known:
			logger.Info("the policy can call non-deterministic builtins; its decisions are cached all the same, as configured (CacheNondeterministic)", "entrypoint", ep, "builtins", names)
		case p.cfg.CacheNondeterministic:
			logger.Info("the bundle does not say whether the policy calls non-deterministic builtins; its decisions are cached all the same, as configured (CacheNondeterministic)", "entrypoint", ep)
		case known:
			logger.Info("the policy can call non-deterministic builtins: its decisions bypass the decision cache", "entrypoint", ep, "builtins", names)
		default:
			logger.Warn("the bundle does not say whether the policy calls non-deterministic builtins (it was not compiled by nexus): its decisions bypass the decision cache", "entrypoint", ep)
		}
		if !p.cfg.CacheNondeterministic {
			out = append(out, ep)
		}
	}
	return out
}

// Ready reports whether a policy is loaded.
func (p *PDP) Ready() bool { return p.ready.Load() }

// DryRun reports Config.DryRun: the Envoy transport answers allow whatever
// the policy decided.
func (p *PDP) DryRun() bool { return p.cfg.DryRun }

// MaxBodyBytes reports Config.MaxBodyBytes (its default filled in): the
// transports bound the request bodies they read by it too.
func (p *PDP) MaxBodyBytes() int64 { return p.cfg.MaxBodyBytes }

// Manifest returns the loaded bundle's manifest.
func (p *PDP) Manifest() bundle.Manifest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.base.Manifest
}

// PolicyRevision returns the loaded bundle's revision.
func (p *PDP) PolicyRevision() string { return *p.policyRev() }

func (p *PDP) policyRev() *string {
	if r := p.policy.Load(); r != nil {
		return r
	}
	empty := ""
	return &empty
}

// Generation counts policy loads (schema changes included): together with
// the data revision it names the state a decision is made from.
func (p *PDP) Generation() uint64 { return p.gen.Load() }

// KnownType reports whether the schema declares typ (true when there is
// no schema to ask).
func (p *PDP) KnownType(typ string) bool {
	t := p.types.Load()
	return t == nil || *t == nil || (*t)[typ]
}

// ResourceTenant is the tenant the store assigns the resource typ:id to,
// its own or the one it inherits up its type's tenancy relations, as the
// default policy reads it: "" when it has none or more than one (or no
// ID, or there is no store).
func (p *PDP) ResourceTenant(ctx context.Context, typ, id string) (string, error) {
	if p.cfg.Relations == nil || id == "" {
		return "", nil
	}
	r, err := builtins.ResourceTenant(ctx, p.cfg.Relations, nil, typ+":"+id, "")
	if err != nil {
		return "", fmt.Errorf("pdp: resource tenant: %w", err)
	}
	if len(r) == 2 {
		return r[1], nil
	}
	return "", nil
}

// RouteMatch is the route rule a request matched: the action on a
// resource of Type, with the segments under "{id}" and "{tenant}".
type RouteMatch struct {
	Action, Type, ID, Tenant string
}

// MatchRoute finds the first route rule of the loaded policy that matches
// method and the path's segments, as the default policy matches proxied
// requests (nexus.envoy_decide).
func (p *PDP) MatchRoute(method string, segs []string) (RouteMatch, bool) {
	t := p.table.Load()
	if t == nil {
		return RouteMatch{}, false
	}
	r, id, tenant, ok := t.Match(method, segs)
	return RouteMatch{Action: r.Action, Type: r.Type, ID: id, Tenant: tenant}, ok
}

// Close flushes the decision log, waiting until ctx ends at most.
func (p *PDP) Close(ctx context.Context) error { return p.log.Close(ctx) }

// inline runs a cache's maintenance on the goroutine that made it due.
func inline(fn func()) { fn() }
