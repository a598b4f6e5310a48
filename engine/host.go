package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/topdown/builtins"
	"github.com/open-policy-agent/opa/v1/topdown/print"
	"github.com/tetratelabs/wazero/api"

	"github.com/nexuspdp/nexus/engine/internal/wasmbin"
)

var i32 = api.ValueTypeI32

// printMu serialises writes of print() output.
var printMu sync.Mutex

// instantiateHost registers the "env" host module the policy imports its
// functions from (its memory is defined by the module itself, see wasmbin).
func (p *policy) instantiateHost(ctx context.Context) error {
	b := p.runtime.NewHostModuleBuilder("env")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(p.hostAbort), []api.ValueType{i32}, nil).Export("opa_abort")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(p.hostPrintln), []api.ValueType{i32}, nil).Export("opa_println")
	for n := 0; n <= 4; n++ {
		params := make([]api.ValueType, 2+n)
		for i := range params {
			params[i] = i32
		}
		nargs := n
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
			p.hostBuiltin(ctx, mod, stack, nargs)
		}), params, []api.ValueType{i32}).Export("opa_builtin" + strconv.Itoa(n))
	}
	_, err := b.Instantiate(ctx)
	return err
}

// instanceOf finds the instance a host function was called from: the
// one whose evaluation's context (hostCtx) the call carries, else (a call
// from outside an evaluation, such as the module's start function) the
// one the watchdog holds for mod.
func (p *policy) instanceOf(ctx context.Context, mod api.Module) *instance {
	if hc, ok := ctx.(*hostCtx); ok && hc.in.mod == mod {
		return hc.in
	}
	if v, ok := p.wd.live.Load(mod); ok {
		return v.(*instance)
	}
	return nil
}

func (p *policy) hostAbort(_ context.Context, mod api.Module, stack []uint64) {
	msg := "(unreadable abort message)"
	if mem := mod.Memory(); mem != nil {
		addr := uint32(stack[0])
		if size := mem.Size(); addr < size {
			if b, ok := mem.Read(addr, min(size-addr, 4096)); ok {
				for i, c := range b {
					if c == 0 {
						b = b[:i]
						break
					}
				}
				msg = string(b)
			}
		}
	}
	panic(&abortPanic{msg: msg})
}

func (p *policy) hostPrintln(ctx context.Context, mod api.Module, stack []uint64) {
	if p.cfg.Print == nil {
		return
	}
	in := p.instanceOf(ctx, mod)
	if in == nil {
		return
	}
	if b, ok := in.cstring(uint32(stack[0])); ok {
		line := make([]byte, 0, len(b)+1)
		line = append(append(line, b...), '\n')
		printMu.Lock()
		_, _ = p.cfg.Print.Write(line)
		printMu.Unlock()
	}
}

// Yields: a loop of the module whose budget is spent calls
// opa_builtin0(wasmbin.YieldID, 0). The call is where a long evaluation
// lets the Go runtime in: compiled Wasm has no point where the runtime
// can preempt it, so without the call an evaluation that runs for seconds
// would hold a garbage collection's stop-the-world, and with it every
// goroutine of the process, the watchdog included, for as long. The
// budget adapts so that about yieldInterval passes between yields:
// halved (or quartered) after a longer interval, doubled after a shorter
// one, within [1, maxBudget]. An instance starts with
// wasmbin.InitialBudget and keeps what it adapted to; maxBudget bounds
// how long the first interval of an evaluation whose loops are slow can
// be (a thousand iterations of a pass over a large value).
const (
	yieldInterval = 100 * time.Microsecond
	maxBudget     = 1 << 10
)

// yieldEpoch is the origin of instance.yieldAt: time.Since(yieldEpoch)
// reads the monotonic clock alone.
var yieldEpoch = time.Now()

// hostYield answers a loop whose budget is spent: 1 (stop) when the
// watchdog fired for the evaluation, else 0 with a new budget. Being Go
// code, the call is a point where the goroutine stops for a
// stop-the-world the runtime asked for.
func (p *policy) hostYield(ctx context.Context, mod api.Module, stack []uint64) {
	in := p.instanceOf(ctx, mod)
	// No instance yet: the module's start function runs before
	// instantiate registers the instance. Go on.
	if in == nil {
		stack[0] = 0
		mod.ExportedGlobal(wasmbin.InterruptGlobal).(api.MutableGlobal).Set(wasmbin.InitialBudget)
		return
	}
	// The budget is set under the lock the watchdog spends it under.
	in.wmu.Lock()
	defer in.wmu.Unlock()
	if in.fired {
		stack[0] = 1
		return
	}
	now := time.Since(yieldEpoch)
	if in.yieldAt != 0 {
		switch d := now - in.yieldAt; {
		case d > 4*yieldInterval:
			in.budget = max(1, in.budget/4)
		case d > yieldInterval:
			in.budget = max(1, in.budget/2)
		case d < yieldInterval/2:
			in.budget = min(maxBudget, 2*in.budget)
		}
	}
	in.yieldAt = now
	in.interrupt.Set(uint64(in.budget))
	stack[0] = 0
}

// hostBuiltin dispatches opa_builtinN(id, ctx, args...) to the registry or
// OPA's Go implementation. The result address replaces stack[0]; 0 means
// undefined.
func (p *policy) hostBuiltin(ctx context.Context, mod api.Module, stack []uint64, nargs int) {
	id := uint32(stack[0])
	if id == wasmbin.YieldID && nargs == 0 {
		p.hostYield(ctx, mod, stack)
		return
	}
	in := p.instanceOf(ctx, mod)
	if in == nil || int(id) >= len(p.builtins) || p.builtins[id] == nil {
		panic(&abortPanic{msg: fmt.Sprintf("unknown builtin id %d", id)})
	}
	hb := p.builtins[id]
	var args [4]uint32
	for i := 0; i < nargs; i++ {
		args[i] = uint32(stack[2+i])
	}
	stack[0] = uint64(in.callBuiltin(ctx, hb, id, args[:nargs]))
}

func (in *instance) callBuiltin(ctx context.Context, hb *hostBuiltin, id uint32, args []uint32) uint32 {
	p := in.p
	switch hb.kind {
	case kindPred2, kindPred3, kindList2, kindList3, kindList4, kindJSON2:
		var s [4]string
		n := 2
		switch hb.kind {
		case kindPred3, kindList3:
			n = 3
		case kindList4:
			n = 4
		}
		if len(args) != n {
			panic(&builtinPanic{name: hb.name, err: fmt.Errorf("called with %d arguments, want %d", len(args), n)})
		}
		for i := 0; i < n; i++ {
			v, ok := in.str(args[i])
			if !ok {
				return 0 // not a string: undefined, as for a type error in OPA
			}
			s[i] = v
		}
		var (
			ok   bool
			list []string
			err  error
		)
		if hb.kind == kindJSON2 {
			raw, err := hb.json2(ctx, in.buf[:0], s[0], s[1])
			if err != nil {
				panic(&builtinPanic{name: hb.name, err: err})
			}
			in.buf = raw
			if len(raw) == 0 {
				return 0
			}
			return in.jsonValue(ctx, raw)
		}
		switch hb.kind {
		case kindPred2:
			ok, err = hb.pred2(ctx, s[0], s[1])
		case kindPred3:
			ok, err = hb.pred3(ctx, s[0], s[1], s[2])
		case kindList2:
			list, err = hb.list2(ctx, in.strs[:0], s[0], s[1])
		case kindList3:
			list, err = hb.list3(ctx, in.strs[:0], s[0], s[1], s[2])
		case kindList4:
			list, err = hb.list4(ctx, in.strs[:0], s[0], s[1], s[2], s[3])
		}
		if err != nil {
			panic(&builtinPanic{name: hb.name, err: err})
		}
		if hb.kind == kindPred2 || hb.kind == kindPred3 {
			if ok {
				return p.trueAddr
			}
			return p.falseAddr
		}
		addr := in.stringArray(ctx, list)
		clear(list)
		in.strs = list[:0]
		return addr
	case kindValues2:
		if len(args) != 2 {
			panic(&builtinPanic{name: hb.name, err: fmt.Errorf("called with %d arguments, want 2", len(args))})
		}
		m, ok := in.mem.Read(0, in.mem.Size())
		if !ok {
			panic(&abortPanic{msg: "unreadable memory"})
		}
		addr, _ := in.writeValue(ctx, func(w *ValueWriter) {
			if err := hb.values2(ctx, w, Value{m, args[0]}, Value{m, args[1]}); err != nil {
				w.fail(err)
			}
		}, hb.name)
		return addr
	case kindGeneric:
		terms := in.termArgs(ctx, hb, args, false, nil)
		out, err := hb.generic(ctx, terms)
		if err != nil {
			panic(&builtinPanic{name: hb.name, err: err})
		}
		if out == nil {
			return 0
		}
		return in.termValue(ctx, hb, out, nil)
	case kindTopdown:
		var key []byte
		memo := p.pure[id]
		if memo {
			m, _ := in.mem.Read(0, in.mem.Size())
			if key, memo = in.memo.memoKey(m, id, args); memo {
				if t, hit := in.memo.get(key); hit {
					return in.topdownResult(ctx, hb, t)
				}
			}
		}
		keyed := &in.memo
		if !memo {
			keyed = nil
		}
		terms := in.termArgs(ctx, hb, args, true, keyed)
		if in.bstate == nil {
			in.bstate = &builtinState{}
		}
		bctx := in.bstate.context(ctx, in, p.printHook)
		var out *ast.Term
		err := p.topdown[id](*bctx, terms, func(t *ast.Term) error {
			out = t
			return nil
		})
		if err != nil {
			var halt topdown.Halt
			if errors.As(err, &halt) {
				panic(&builtinPanic{name: hb.name, err: err})
			}
			return 0 // non-halting errors make the call undefined, as in OPA's Wasm runtime
		}
		if memo {
			in.memo.put(key, out)
		}
		return in.topdownResult(ctx, hb, out)
	}
	panic(&abortPanic{msg: "unreachable builtin kind"})
}

// topdownResult is the address of an OPA builtin's result: 0 for
// undefined (nil), the module's own true and false for a boolean, else
// the value written into the heap.
func (in *instance) topdownResult(ctx context.Context, hb *hostBuiltin, t *ast.Term) uint32 {
	if t == nil {
		return 0
	}
	if b, ok := t.Value.(ast.Boolean); ok {
		if b {
			return in.p.trueAddr
		}
		return in.p.falseAddr
	}
	// OPA's builtins never change a term they answered: one answered
	// again has the same value (imageMemo).
	if img := in.images.images[t]; img != nil {
		return in.writeImage(ctx, img)
	}
	return in.termValue(ctx, hb, t, &in.images)
}

// termArgs reads a builtin's arguments as terms; with cached, small ones
// come from the instance's cache of terms read before (argCache), which
// only OPA's own builtins, which leave their operands as they are, get.
// keyed, if not nil, holds the arguments' keys already worked out for the
// call (resultMemo.memoKey).
func (in *instance) termArgs(ctx context.Context, hb *hostBuiltin, args []uint32, cached bool, keyed *resultMemo) []*ast.Term {
	terms := make([]*ast.Term, len(args))
	var m []byte
	if cached {
		m, _ = in.mem.Read(0, in.mem.Size())
	}
	for i, a := range args {
		var t *ast.Term
		var err error
		switch {
		case keyed != nil:
			t, err = in.args.termKeyed(keyed.argKey(i), func() (*ast.Term, error) { return in.readTerm(a, 0) })
		case m != nil:
			t, err = in.args.term(m, a, func() (*ast.Term, error) { return in.readTerm(a, 0) })
		default:
			t, err = in.readTerm(a, 0)
		}
		if err == nil {
			terms[i] = t
			continue
		}
		// Fall back to OPA's own serialisation.
		s, err := in.call1(ctx, in.fValueDump, uint64(a))
		if err != nil {
			panic(&builtinPanic{name: hb.name, err: err})
		}
		b, ok := in.cstring(s)
		if !ok {
			panic(&builtinPanic{name: hb.name, err: errors.New("unreadable argument")})
		}
		t, err = ast.ParseTerm(string(b))
		if err != nil {
			panic(&builtinPanic{name: hb.name, err: fmt.Errorf("argument %d: %w", i, err)})
		}
		terms[i] = t
	}
	return terms
}

// termValue writes t's value into the heap as the runtime's values, and
// tells images, if not nil, that it wrote t. Values that are not data
// (never the result of a builtin) go through the runtime's parser of
// OPA's value syntax, as before.
func (in *instance) termValue(ctx context.Context, hb *hostBuiltin, t *ast.Term, images *imageMemo) uint32 {
	if addr, ok := in.writeValue(ctx, func(w *ValueWriter) { writeAST(w, t.Value) }, ""); ok {
		if images != nil {
			images.wrote(t, &in.barena, addr-in.barena.base)
		}
		return addr
	}
	raw, err := appendValue(in.buf[:0], t.Value)
	if err != nil {
		raw = append(in.buf[:0], t.String()...)
	}
	in.buf = raw
	a, err := in.malloc(ctx, uint32(len(raw)))
	if err != nil {
		panic(err)
	}
	in.mem.Write(a, raw)
	v, err := in.call1(ctx, in.fValueParse, uint64(a), uint64(len(raw)))
	if err != nil {
		panic(&builtinPanic{name: hb.name, err: err})
	}
	return v
}

// jsonNumberText is the number s as JSON text. OPA's evaluator keeps a
// number's text as written, and to_number keeps what Go's
// strconv.ParseFloat reads ("+5", ".5", "0x1p4", "1_000"), which JSON
// and the runtime cannot hold: such a number is written as the same
// value in JSON's form, to 256 bits, so that it compares and computes
// as OPA's evaluator has it. Text that is no number at all is left as it
// is, for the writer to refuse.
func jsonNumberText(s string) string {
	f, _, err := big.ParseFloat(s, 0, 256, big.ToNearestEven)
	if err != nil || f.IsInf() {
		return s
	}
	if f.IsInt() {
		i, _ := f.Int(nil)
		return i.String()
	}
	return f.Text('g', -1)
}

// writeAST writes an OPA value; anything but data fails the writer.
func writeAST(w *ValueWriter, v ast.Value) {
	switch x := v.(type) {
	case ast.Null:
		w.Null()
	case ast.Boolean:
		w.Bool(bool(x))
	case ast.Number:
		if s := string(x); validNumber(s) {
			w.push(w.a.number(s)) // checked: what Number would do
		} else {
			w.Number(jsonNumberText(s))
		}
	case ast.String:
		w.String(string(x))
	case *ast.Array:
		w.BeginArray()
		for i := 0; i < x.Len(); i++ {
			writeAST(w, x.Elem(i).Value)
		}
		w.End()
	case ast.Object:
		w.BeginObject()
		x.Foreach(func(k, v *ast.Term) {
			writeAST(w, k.Value)
			writeAST(w, v.Value)
		})
		w.End()
	case ast.Set:
		w.BeginSet()
		x.Foreach(func(e *ast.Term) { writeAST(w, e.Value) })
		w.End()
	default:
		w.fail(errValueLayout)
	}
}

// writeValue writes the value write produces into one block the module's
// opa_malloc hands out, laid out as blocks of its own heap, and returns
// its address; false if write failed or wrote nothing. When builtin
// names the builtin that writes its own result, write failing is that
// builtin's error, which halts the evaluation.
func (in *instance) writeValue(ctx context.Context, write func(w *ValueWriter), builtin string) (uint32, bool) {
	a := &in.barena
	a.reset()
	w := &in.vw
	w.reset(a)
	write(w)
	root, has, err := w.result()
	if err != nil && builtin != "" {
		panic(&builtinPanic{name: builtin, err: err})
	}
	if err != nil || !has {
		return 0, false
	}
	base, err := in.malloc(ctx, uint32(len(a.b)))
	if err != nil {
		panic(err)
	}
	a.relocate(base)
	if !in.mem.Write(base, a.b) {
		panic(&abortPanic{msg: "opa_malloc: out of memory"})
	}
	return base + root.addr, true
}

// writeImage writes a copy of img into one block from opa_malloc, as
// writeValue wrote it, and returns the address of its value.
func (in *instance) writeImage(ctx context.Context, img *termImage) uint32 {
	base, err := in.malloc(ctx, uint32(len(img.a.b)))
	if err != nil {
		panic(err)
	}
	img.a.relocate(base)
	if !in.mem.Write(base, img.a.b) {
		panic(&abortPanic{msg: "opa_malloc: out of memory"})
	}
	return base + img.root
}

// stringArray writes list as an array value into the heap.
func (in *instance) stringArray(ctx context.Context, list []string) uint32 {
	addr, _ := in.writeValue(ctx, func(w *ValueWriter) {
		w.BeginArray()
		for _, s := range list {
			w.String(s)
		}
		w.End()
	}, "")
	return addr
}

// jsonValue writes the JSON text b as a value into the heap; text that is
// not JSON goes to the runtime's parser, as before.
func (in *instance) jsonValue(ctx context.Context, b []byte) uint32 {
	if addr, ok := in.writeValue(ctx, func(w *ValueWriter) { w.JSON(b) }, ""); ok {
		return addr
	}
	return in.parseJSON(ctx, b)
}

// parseJSON writes the JSON text b as a value into the heap.
func (in *instance) parseJSON(ctx context.Context, b []byte) uint32 {
	a, err := in.malloc(ctx, uint32(len(b)))
	if err != nil {
		panic(err)
	}
	in.mem.Write(a, b)
	v, err := in.call1(ctx, in.fJSONParse, uint64(a), uint64(len(b)))
	if err != nil {
		panic(err)
	}
	return v
}

// builtinCapabilities are the capabilities OPA's Go builtins see. Of
// them they read only AllowNet (http.send, net.lookup_ip_addr, JSON schema
// references), where nil lets them reach any host, as in OPA. Which
// builtins a policy may call was settled when it was compiled.
var builtinCapabilities = &ast.Capabilities{}

// builtinState is the topdown context of an instance's evaluations, made
// on the first call of an OPA Go builtin (evaluations without one
// allocate nothing) and used again by the next evaluations: their own
// context, clock and per-evaluation cache, and a new Cancel only once one
// was raised. The builtins' metrics are OPA's no-op: nothing reads them.
type builtinState struct {
	bctx    topdown.BuiltinContext
	live    bool // bctx is this evaluation's
	watched bool // the watchdog holds cancel
	cancel  topdown.Cancel
	cache   builtins.Cache
	// jwtKeys outlives the evaluations, in cache under jwtKeysEntry.
	jwtKeys jwtKeyMemo
}

// context returns the evaluation's builtin context. Its Cancel is raised
// by the engine's watchdog, as the instance's loop budget is spent, when the
// evaluation's context is done: no timer per evaluation.
func (s *builtinState) context(ctx context.Context, in *instance, hook print.Hook) *topdown.BuiltinContext {
	if s.live {
		return &s.bctx
	}
	if s.cancel == nil || s.cancel.Cancelled() {
		s.cancel = topdown.NewCancel()
	}
	if s.cache == nil {
		s.cache = make(builtins.Cache)
	} else {
		clear(s.cache)
	}
	if in.p.jwt {
		if s.jwtKeys == nil {
			s.jwtKeys = make(jwtKeyMemo)
		}
		s.cache[jwtKeysEntry{}] = s.jwtKeys
	}
	s.bctx = topdown.BuiltinContext{
		Context:      ctx,
		Metrics:      metrics.NoOp(), // nothing reads the builtins' metrics
		Seed:         rand.Reader,
		Time:         ast.NumberTerm(jsonNumber(time.Now().UnixNano())),
		Cancel:       s.cancel,
		Cache:        s.cache,
		PrintHook:    hook,
		Capabilities: builtinCapabilities,
	}
	s.live = true
	if watchable(ctx) {
		s.watched = true
		in.wmu.Lock()
		in.tdCancel = s.cancel
		if in.fired || ctx.Err() != nil {
			s.cancel.Cancel()
		}
		in.wmu.Unlock()
	}
	return &s.bctx
}

// done ends the evaluation's use of the builtin context.
func (s *builtinState) done(in *instance) {
	if s.watched {
		in.wmu.Lock()
		in.tdCancel = nil
		in.wmu.Unlock()
		s.watched = false
	}
	s.live = false
	s.bctx.Context = nil
}

// printWriter is the print hook of OPA's print builtin: one line per call.
type printWriter struct{ w io.Writer }

func (p printWriter) Print(_ print.Context, msg string) error {
	if p.w == nil {
		return nil
	}
	printMu.Lock()
	defer printMu.Unlock()
	_, err := io.WriteString(p.w, msg+"\n")
	return err
}
