package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/engine/internal/wasmbin"
)

const pageSize = 65536

// policy is one loaded bundle: its runtime, compiled module, the snapshot of
// an instance's memory after the data was parsed, and the pool of
// instances. Its runtime is closed once it is retired and its last
// instance is closed.
type policy struct {
	cfg      *Config
	revision string

	runtime  wazero.Runtime
	compiled wazero.CompiledModule

	entrypoints map[string]int32
	builtins    []*hostBuiltin // by builtin id
	topdown     []topdown.BuiltinFunc
	pure        []bool // by id: an OPA builtin whose results an instance may keep (pureBuiltin)
	jwt         bool   // it calls a JWT builtin with a cache (jwtCached): instances keep a jwtKeyMemo

	snapshot    []byte // memory [0, evalHeapPtr) after data parsing
	pages       uint32 // memory pages at snapshot time
	dataAddr    uint32
	evalHeapPtr uint32
	trueAddr    uint32
	falseAddr   uint32

	pool
	wd    *watchdog // its live map holds every instance of the engine
	stats *counters

	loadTime  time.Duration
	printHook printWriter
}

// counters are the engine's instance statistics, shared by its bundles.
type counters struct {
	created, discarded, oversized atomic.Int64
}

func newPolicy(ctx context.Context, cfg *Config, wd *watchdog, cache wazero.CompilationCache, stats *counters, b *bundle.Bundle) (_ *policy, err error) {
	start := time.Now()
	mod, err := wasmbin.Rewrite(b.Wasm, cfg.MemoryLimitPages)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidBundle, err)
	}
	p := &policy{cfg: cfg, revision: b.Manifest.Revision, wd: wd, stats: stats, printHook: printWriter{cfg.Print}}
	p.runtime = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().
		// Deadlines are enforced by the engine's watchdog through the
		// loop budget wasmbin adds, not by wazero's per-call goroutine.
		WithCloseOnContextDone(false).
		WithCompilationCache(cache).
		WithMemoryLimitPages(cfg.MemoryLimitPages))
	defer func() {
		if err != nil {
			_ = p.runtime.Close(context.Background())
		}
	}()
	if err := p.instantiateHost(ctx); err != nil {
		return nil, fmt.Errorf("engine: host module: %w", err)
	}
	p.compiled, err = p.runtime.CompileModule(ctx, mod)
	if err != nil {
		return nil, fmt.Errorf("%w: compile: %w", ErrInvalidBundle, err)
	}
	inst, err := p.instantiate(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: instantiate: %w", ErrInvalidBundle, err)
	}
	if err := p.initFrom(ctx, inst, b); err != nil {
		p.drop(inst)
		return nil, err
	}
	p.pool.init(cfg.MaxInstances)
	p.slots[0].v.Store(inst)
	p.refs.Add(1)
	p.loadTime = time.Since(start)
	return p, nil
}

// initFrom reads the module's ABI, entrypoints and builtins through the
// template instance, parses the data into its heap and takes the snapshot.
func (p *policy) initFrom(ctx context.Context, inst *instance, b *bundle.Bundle) error {
	major := inst.mod.ExportedGlobal("opa_wasm_abi_version")
	minor := inst.mod.ExportedGlobal("opa_wasm_abi_minor_version")
	if major == nil || minor == nil {
		return fmt.Errorf("%w: no OPA ABI version", ErrInvalidBundle)
	}
	if major.Get() != 1 || minor.Get() < 2 {
		return fmt.Errorf("%w: OPA Wasm ABI %d.%d, need 1.2 or later", ErrInvalidBundle, major.Get(), minor.Get())
	}
	for _, name := range []string{"eval", "opa_heap_ptr_set", "opa_malloc", "opa_json_parse", "opa_json_dump", "opa_value_dump", "opa_value_parse", "opa_heap_ptr_get", "entrypoints", "builtins"} {
		if inst.mod.ExportedFunction(name) == nil {
			return fmt.Errorf("%w: module does not export %s", ErrInvalidBundle, name)
		}
	}

	var eps map[string]int32
	if err := inst.callJSON(ctx, "entrypoints", &eps); err != nil {
		return err
	}
	p.entrypoints = eps
	var bis map[string]int32
	if err := inst.callJSON(ctx, "builtins", &bis); err != nil {
		return err
	}
	maxID := int32(-1)
	for _, id := range bis {
		if id < 0 || id > 1<<16 {
			return fmt.Errorf("%w: builtin id %d", ErrInvalidBundle, id)
		}
		maxID = max(maxID, id)
	}
	p.builtins = make([]*hostBuiltin, maxID+1)
	p.topdown = make([]topdown.BuiltinFunc, maxID+1)
	p.pure = make([]bool, maxID+1)
	var missing []string
	for name, id := range bis {
		if hb := p.cfg.Builtins.lookup(name); hb != nil {
			p.builtins[id] = hb
			continue
		}
		opaName := name
		if n, ok := bundle.OPAHostAliases[name]; ok {
			opaName = n // OPA's builtin, which the compiler had the host run
		}
		if f := topdown.GetBuiltin(opaName); f != nil {
			p.builtins[id] = &hostBuiltin{name: opaName, kind: kindTopdown}
			p.topdown[id] = jwtCached(opaName, f)
			p.jwt = p.jwt || isJWTCached(opaName)
			p.pure[id] = pureBuiltin(opaName)
			continue
		}
		missing = append(missing, name)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: builtins not provided by the host: %v", ErrInvalidBundle, missing)
	}

	// Parse the data once, into the template's heap.
	data := b.Data
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	if !json.Valid(data) {
		return fmt.Errorf("%w: data is not valid JSON", ErrInvalidBundle)
	}
	// Data the module's memory cannot hold parsed is too large, not a
	// fault of nexus: bundle.ErrTooLarge, which the admin API answers 413.
	tooLarge := func() error {
		return fmt.Errorf("%w: data.json (%d bytes) does not fit in a policy instance's memory (%d MiB) once parsed",
			bundle.ErrTooLarge, len(data), uint64(p.cfg.MemoryLimitPages)*pageSize>>20)
	}
	if uint64(len(data)) >= uint64(p.cfg.MemoryLimitPages)*pageSize {
		return tooLarge()
	}
	raw, err := inst.malloc(ctx, uint32(len(data)))
	if err != nil {
		if ee := (*EvalError)(nil); errors.As(classify(ctx, "", err), &ee) && ee.Code == CodeMemory {
			return tooLarge()
		}
		return err
	}
	if !inst.mem.Write(raw, data) {
		return tooLarge()
	}
	addr, err := inst.call1(ctx, inst.fValueParse, uint64(raw), uint64(len(data)))
	if err != nil {
		if ee := (*EvalError)(nil); errors.As(classify(ctx, "", err), &ee) && ee.Code == CodeMemory {
			return tooLarge()
		}
		return fmt.Errorf("%w: parse data: %w", ErrInvalidBundle, err)
	}
	if addr == 0 {
		return fmt.Errorf("%w: module could not parse the data", ErrInvalidBundle)
	}
	p.dataAddr = addr
	// Constant booleans for fast-path predicate results.
	for _, v := range []struct {
		dst *uint32
		b   byte
	}{{&p.trueAddr, 1}, {&p.falseAddr, 0}} {
		a, err := inst.malloc(ctx, 8)
		if err != nil {
			return err
		}
		inst.mem.Write(a, []byte{2 /* OPA_BOOLEAN */, v.b, 0, 0, 0, 0, 0, 0})
		*v.dst = a
	}
	hp, err := inst.call1(ctx, inst.mod.ExportedFunction("opa_heap_ptr_get"))
	if err != nil {
		return err
	}
	p.evalHeapPtr = hp
	snap, ok := inst.mem.Read(0, hp)
	if !ok {
		return fmt.Errorf("%w: heap pointer %d beyond memory", ErrInvalidBundle, hp)
	}
	p.snapshot = bytes.Clone(snap)
	p.pages = inst.mem.Size() / pageSize
	return nil
}

// instantiate creates a bare instance of the compiled module.
func (p *policy) instantiate(ctx context.Context) (*instance, error) {
	mod, err := p.runtime.InstantiateModule(ctx, p.compiled, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return nil, err
	}
	inst := &instance{p: p, mod: mod, mem: mod.Memory()}
	inst.hctx = hostCtx{Context: endedCtx, in: inst}
	if inst.mem == nil {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("%w: module has no memory", ErrInvalidBundle)
	}
	inst.fEvalCtx = mod.ExportedFunction("eval")
	inst.fHeapSet = mod.ExportedFunction("opa_heap_ptr_set")
	inst.fMalloc = mod.ExportedFunction("opa_malloc")
	inst.fJSONParse = mod.ExportedFunction("opa_json_parse")
	inst.fJSONDump = mod.ExportedFunction("opa_json_dump")
	inst.fValueDump = mod.ExportedFunction("opa_value_dump")
	inst.fValueParse = mod.ExportedFunction("opa_value_parse")
	g, ok := mod.ExportedGlobal(wasmbin.InterruptGlobal).(api.MutableGlobal)
	if !ok {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("%w: module lacks the loop budget", ErrInvalidBundle)
	}
	inst.interrupt, inst.budget = g, wasmbin.InitialBudget
	p.wd.live.Store(mod, inst)
	return inst, nil
}

// newInstance creates an instance from the snapshot (no data parsing) for
// the evaluation whose context is ctx.
func (p *policy) newInstance(ctx context.Context, slot int) (*instance, error) {
	inst, err := p.instantiate(ctx)
	if err != nil {
		return nil, err
	}
	if cur := inst.mem.Size() / pageSize; cur < p.pages {
		if _, ok := inst.mem.Grow(p.pages - cur); !ok {
			p.drop(inst)
			return nil, &EvalError{Code: CodeMemory, Message: "cannot grow a new instance to the snapshot size"}
		}
	}
	if !inst.mem.Write(0, p.snapshot) {
		p.drop(inst)
		return nil, fmt.Errorf("engine: snapshot does not fit")
	}
	inst.slot = slot
	p.stats.created.Add(1)
	return inst, nil
}

// instanceBytes is the memory of a fresh instance.
func (p *policy) instanceBytes() uint64 { return uint64(p.pages) * pageSize }

var errNoResult = errors.New("engine: module returned no result")
