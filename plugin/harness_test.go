package main

// The harness is a Proxy-Wasm ABI 0.2.1 host on wazero that plays Envoy's
// part for tests and benchmarks of the built plugin.wasm: it runs
// _initialize, proxy_on_vm_start and proxy_on_configure, creates root and
// stream contexts, feeds request headers in the ABI's map encoding, records
// HTTP calls and lets the test answer them, and records local responses,
// header changes, logs and metrics.
//
// It is strict where Envoy is: during _initialize and inside
// proxy_on_memory_allocate only the host calls proxy-wasm-cpp-host allows are
// served (the smaller lists of Envoy 1.33 to 1.38); any other call traps with
// "restricted_callback", failing the call as it fails the VM in Envoy. Calls
// that need a context (request headers, local responses, tick period, the
// plugin configuration buffer) are refused outside the callbacks where Envoy
// serves them.
//
// Example:
//
//	h, err := newHost(ctx, wasm, hostConfig{})
//	root, ok, err := h.StartPlugin(ctx, nil, []byte(`{...}`))
//	_ = h.Tick(ctx, root)                       // the plugin polls its snapshot
//	call := h.Calls()[0]
//	_ = h.Respond(ctx, call.Token, [][2]string{{":status", "200"}}, snapshotJSON)
//	res, err := h.Request(ctx, root, [][2]string{{":method", "GET"}, {":path", "/"}})
//
// # Caveats
//
//   - WASI is the subset Envoy gives a module (no arguments, environment or
//     preopened files; stdout and stderr go to the log; ENOSYS for files),
//     implemented here rather than with wazero's full wasi_snapshot_preview1,
//     so the harness can refuse calls by phase as Envoy does. poll_oneoff
//     fails with ENOSYS as in Envoy up to 1.38, which the Go runtime turns
//     into a fatal error: a plugin that sleeps or waits on a timer fails
//     its test as it would fail in Envoy.
//   - The wall clock is fake (Advance moves it); the monotonic clock is real.
//   - One Host is one VM on one goroutine; it is not safe for concurrent use.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

// hostConfig configures a Host. The zero value is ready to use.
type hostConfig struct {
	// Logger receives the plugin's proxy_log and stdout/stderr lines at debug
	// level; nil discards them (they are still kept in Logs).
	Logger *slog.Logger
	// Start is the initial value of the fake wall clock the plugin reads with
	// proxy_get_current_time_nanoseconds and clock_time_get(realtime); zero
	// means 2026-01-01T00:00:00Z. Advance moves it.
	Start time.Time
	// Cache, if set, is shared by Hosts so the plugin is compiled once
	// (wazero.NewCompilationCache()); nil compiles it for every Host.
	Cache wazero.CompilationCache
	// Lenient turns off the phase restrictions (not what Envoy does); for
	// experiments only.
	Lenient bool
}

// LogEntry is one proxy_log call, or one line written to stdout (level -1) or
// stderr (level -2).
type LogEntry struct {
	Level   int
	Message string
}

// HTTPCall is a proxy_http_call the plugin made.
type HTTPCall struct {
	Root      uint32
	Token     uint32
	Cluster   string
	Headers   [][2]string
	Body      []byte
	TimeoutMS uint32
}

// Header returns the first value of name in the call's headers.
func (c *HTTPCall) Header(name string) string { return lookup(c.Headers, name) }

// LocalResponse is a proxy_send_local_response the plugin made.
type LocalResponse struct {
	Status  uint32
	Details string
	Body    []byte
	Headers [][2]string
	raw     []byte // Headers as the plugin encoded them
}

// Header returns the first value of name in the response's headers.
func (r *LocalResponse) Header(name string) string { return lookup(r.Headers, name) }

// Result is what happened to a request's headers in proxy_on_request_headers.
type Result struct {
	// Action is what the plugin returned.
	Action proxywasm.Action
	// Local is the local response the plugin sent, if any.
	Local *LocalResponse
	// Headers are the request headers after the plugin's changes.
	Headers [][2]string
}

// Header returns the first value of name in the request headers after the
// plugin's changes.
func (r *Result) Header(name string) string { return lookup(r.Headers, name) }

func lookup(hs [][2]string, name string) string {
	for _, kv := range hs {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

type phase uint8

const (
	phaseIdle     phase = iota
	phaseInit           // _initialize
	phaseAlloc          // proxy_on_memory_allocate
	phaseCallback       // any other proxy_on_* callback
)

func (p phase) String() string {
	return [...]string{"idle", "_initialize", "proxy_on_memory_allocate", "callback"}[p]
}

// callback is the callback running, which decides what the host calls see.
type callback uint8

const (
	cbNone callback = iota
	cbVMStart
	cbConfigure
	cbTick
	cbHTTPCallResponse
	cbRequestHeaders
	cbOther
)

// Host is one Proxy-Wasm VM: a wazero runtime with the plugin module
// instantiated and initialised, playing the part of Envoy. It is not safe for
// concurrent use.
type Host struct {
	log     *slog.Logger
	lenient bool
	rt      wazero.Runtime
	mod     api.Module

	malloc          api.Function
	onContextCreate api.Function
	onVMStart       api.Function
	onConfigure     api.Function
	onTick          api.Function
	onHTTPCallResp  api.Function
	onReqHeaders    api.Function
	onDone          api.Function
	onDelete        api.Function

	now      int64
	monoBase time.Time

	phase    phase
	cb       callback
	cbCtx    uint32
	nextID   uint32
	roots    map[uint32]bool
	streams  map[uint32]*stream
	logs     []LogEntry
	tick     map[uint32]uint32 // root -> period ms
	calls    []HTTPCall
	token    uint32
	metrics  map[string]uint32
	counters []int64
	names    []string

	vmConfig, pluginConfig []byte
	callResp               *callReply
	lastLocal              *LocalResponse
	stack                  []uint64  // CallWithStack stack of callbacks
	mstack                 [1]uint64 // and of proxy_on_memory_allocate

	initCalls  map[string]int // host calls made during _initialize
	allocCalls map[string]int // host calls made during proxy_on_memory_allocate
	wasiCalls  map[string]int // WASI calls made in callbacks
	refused    []string
}

type stream struct {
	root    uint32
	headers [][2]string
	encoded []byte // cached encoding of headers, nil when stale
	local   *LocalResponse
}

type callReply struct {
	headers []byte
	body    []byte
}

// errRestricted is the trap a refused host call raises.
var errRestricted = errors.New("restricted_callback")

// newHost compiles and instantiates the plugin, checks it exports the ABI
// 0.2.1 marker and proxy_on_memory_allocate, and runs _initialize with
// Envoy's restrictions (only proxy_log and a few WASI calls are allowed). A
// refused call fails newHost, as it fails the VM in Envoy.
func newHost(ctx context.Context, wasm []byte, cfg hostConfig) (*Host, error) {
	h := &Host{
		log:        cfg.Logger,
		lenient:    cfg.Lenient,
		monoBase:   time.Now(),
		roots:      map[uint32]bool{},
		streams:    map[uint32]*stream{},
		tick:       map[uint32]uint32{},
		metrics:    map[string]uint32{},
		initCalls:  map[string]int{},
		allocCalls: map[string]int{},
		wasiCalls:  map[string]int{},
		nextID:     1,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	start := cfg.Start
	if start.IsZero() {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	h.now = start.UnixNano()

	rc := wazero.NewRuntimeConfig()
	if cfg.Cache != nil {
		rc = rc.WithCompilationCache(cfg.Cache)
	}
	h.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	compiled, err := h.rt.CompileModule(ctx, wasm)
	if err != nil {
		h.rt.Close(ctx)
		return nil, fmt.Errorf("harness: compiling plugin: %w", err)
	}
	if err := h.instantiateHost(ctx, compiled); err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	exports := compiled.ExportedFunctions()
	for _, name := range []string{"proxy_abi_version_0_2_1", "proxy_on_memory_allocate", "_initialize"} {
		if _, ok := exports[name]; !ok {
			h.rt.Close(ctx)
			return nil, fmt.Errorf("harness: plugin does not export %s", name)
		}
	}
	mod, err := h.rt.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithName("plugin").WithStartFunctions())
	if err != nil {
		h.rt.Close(ctx)
		return nil, fmt.Errorf("harness: instantiating plugin: %w", err)
	}
	h.mod = mod
	fn := func(name string) api.Function { return mod.ExportedFunction(name) }
	h.malloc = fn("proxy_on_memory_allocate")
	h.onContextCreate = fn("proxy_on_context_create")
	h.onVMStart = fn("proxy_on_vm_start")
	h.onConfigure = fn("proxy_on_configure")
	h.onTick = fn("proxy_on_tick")
	h.onHTTPCallResp = fn("proxy_on_http_call_response")
	h.onReqHeaders = fn("proxy_on_request_headers")
	h.onDone = fn("proxy_on_done")
	h.onDelete = fn("proxy_on_delete")

	h.phase = phaseInit
	_, err = fn("_initialize").Call(ctx)
	h.phase = phaseIdle
	if err != nil {
		h.rt.Close(ctx)
		return nil, fmt.Errorf("harness: _initialize: %w", err)
	}
	return h, nil
}

// Close releases the runtime.
func (h *Host) Close(ctx context.Context) error { return h.rt.Close(ctx) }

// MemorySize returns the size of the plugin's linear memory in bytes.
func (h *Host) MemorySize() uint32 { return h.mod.Memory().Size() }

// Advance moves the fake wall clock forward by d.
func (h *Host) Advance(d time.Duration) { h.now += int64(d) }

// Logs returns every log line so far.
func (h *Host) Logs() []LogEntry { return append([]LogEntry(nil), h.logs...) }

// Refused returns the host calls refused so far ("phase: module.name").
func (h *Host) Refused() []string { return append([]string(nil), h.refused...) }

// InitCalls returns how often each host function was called during
// _initialize.
func (h *Host) InitCalls() map[string]int { return clone(h.initCalls) }

// AllocCalls returns how often each host function was called from inside
// proxy_on_memory_allocate.
func (h *Host) AllocCalls() map[string]int { return clone(h.allocCalls) }

// WASICalls returns how often each WASI function was called from callbacks
// (after _initialize, outside allocation). A sleeping plugin shows poll_oneoff.
func (h *Host) WASICalls() map[string]int { return clone(h.wasiCalls) }

func clone(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Counter returns the value of the counter metric name and whether the
// plugin defined it.
func (h *Host) Counter(name string) (int64, bool) {
	id, ok := h.metrics[name]
	if !ok {
		return 0, false
	}
	return h.counters[id], true
}

// TickPeriod returns the tick period root asked for, in milliseconds.
func (h *Host) TickPeriod(root uint32) uint32 { return h.tick[root] }

// Calls returns the HTTP calls made and not yet answered.
func (h *Host) Calls() []HTTPCall { return append([]HTTPCall(nil), h.calls...) }

// call runs callback f of context ctxID with params, recording which
// callback runs so host calls are served (or refused) as Envoy would.
func (h *Host) call(ctx context.Context, cb callback, ctxID uint32, f api.Function, name string, params ...uint64) (uint64, error) {
	if f == nil {
		return 0, fmt.Errorf("harness: plugin does not export %s", name)
	}
	prevCB, prevCtx, prevPhase := h.cb, h.cbCtx, h.phase
	h.cb, h.cbCtx, h.phase = cb, ctxID, phaseCallback
	stack := append(h.stack[:0], params...)
	if len(stack) == 0 {
		stack = append(stack, 0)
	}
	err := f.CallWithStack(ctx, stack)
	h.stack = stack
	h.cb, h.cbCtx, h.phase = prevCB, prevCtx, prevPhase
	if err != nil {
		return 0, fmt.Errorf("harness: %s: %w", name, err)
	}
	if len(f.Definition().ResultTypes()) == 0 {
		return 0, nil
	}
	return stack[0], nil
}

// StartPlugin creates a root context, starts the VM with vmConfig and
// configures the plugin with pluginConfig, as Envoy does when it loads a
// filter. ok is what proxy_on_configure returned: false means Envoy would
// refuse the configuration.
func (h *Host) StartPlugin(ctx context.Context, vmConfig, pluginConfig []byte) (root uint32, ok bool, err error) {
	root = h.nextID
	h.nextID++
	h.roots[root] = true
	if _, err := h.call(ctx, cbOther, root, h.onContextCreate, "proxy_on_context_create", uint64(root), 0); err != nil {
		return 0, false, err
	}
	h.vmConfig = vmConfig
	r, err := h.call(ctx, cbVMStart, root, h.onVMStart, "proxy_on_vm_start", uint64(root), uint64(len(vmConfig)))
	h.vmConfig = nil
	if err != nil || uint32(r) == 0 {
		return root, false, err
	}
	ok, err = h.Configure(ctx, root, pluginConfig)
	return root, ok, err
}

// Configure calls proxy_on_configure on root with a new plugin configuration.
func (h *Host) Configure(ctx context.Context, root uint32, pluginConfig []byte) (bool, error) {
	h.pluginConfig = pluginConfig
	r, err := h.call(ctx, cbConfigure, root, h.onConfigure, "proxy_on_configure", uint64(root), uint64(len(pluginConfig)))
	h.pluginConfig = nil
	return err == nil && uint32(r) != 0, err
}

// DeleteRoot ends a root context (proxy_on_done, proxy_on_delete).
func (h *Host) DeleteRoot(ctx context.Context, root uint32) error {
	if _, err := h.call(ctx, cbOther, root, h.onDone, "proxy_on_done", uint64(root)); err != nil {
		return err
	}
	_, err := h.call(ctx, cbOther, root, h.onDelete, "proxy_on_delete", uint64(root))
	delete(h.roots, root)
	return err
}

// Tick calls proxy_on_tick on root.
func (h *Host) Tick(ctx context.Context, root uint32) error {
	_, err := h.call(ctx, cbTick, root, h.onTick, "proxy_on_tick", uint64(root))
	return err
}

func (h *Host) takeCall(token uint32) (HTTPCall, error) {
	for i, c := range h.calls {
		if c.Token == token {
			h.calls = append(h.calls[:i], h.calls[i+1:]...)
			return c, nil
		}
	}
	return HTTPCall{}, fmt.Errorf("harness: no pending HTTP call with token %d", token)
}

// Respond delivers a reply to the pending HTTP call token:
// proxy_on_http_call_response on the root that made it, with headers (which
// should hold ":status") and body readable through the ABI.
func (h *Host) Respond(ctx context.Context, token uint32, headers [][2]string, body []byte) error {
	c, err := h.takeCall(token)
	if err != nil {
		return err
	}
	return h.deliver(ctx, c.Root, token, headers, body)
}

// RespondTo delivers a reply for token to root whether or not such a call is
// pending: a reply the plugin no longer expects.
func (h *Host) RespondTo(ctx context.Context, root, token uint32, headers [][2]string, body []byte) error {
	_, _ = h.takeCall(token)
	return h.deliver(ctx, root, token, headers, body)
}

// Fail delivers the failure of HTTP call token (reset, timeout): a reply with
// no headers.
func (h *Host) Fail(ctx context.Context, token uint32) error {
	c, err := h.takeCall(token)
	if err != nil {
		return err
	}
	_, err = h.call(ctx, cbHTTPCallResponse, c.Root, h.onHTTPCallResp, "proxy_on_http_call_response",
		uint64(c.Root), uint64(token), 0, 0, 0)
	return err
}

func (h *Host) deliver(ctx context.Context, root, token uint32, headers [][2]string, body []byte) error {
	h.callResp = &callReply{headers: proxywasm.EncodePairs(headers), body: body}
	defer func() { h.callResp = nil }()
	_, err := h.call(ctx, cbHTTPCallResponse, root, h.onHTTPCallResp, "proxy_on_http_call_response",
		uint64(root), uint64(token), uint64(len(headers)), uint64(len(body)), 0)
	return err
}

// NewStream creates an HTTP stream context under root.
func (h *Host) NewStream(ctx context.Context, root uint32) (uint32, error) {
	id := h.nextID
	h.nextID++
	h.streams[id] = &stream{root: root}
	if _, err := h.call(ctx, cbOther, id, h.onContextCreate, "proxy_on_context_create", uint64(id), uint64(root)); err != nil {
		return 0, err
	}
	return id, nil
}

// RequestHeaders feeds headers to stream id (proxy_on_request_headers with
// end_of_stream set) and returns what the plugin did.
func (h *Host) RequestHeaders(ctx context.Context, id uint32, headers [][2]string) (Result, error) {
	s := h.streams[id]
	if s == nil {
		return Result{}, fmt.Errorf("harness: no stream %d", id)
	}
	s.headers = append(s.headers[:0], headers...)
	s.encoded = nil
	s.local = nil
	a, err := h.call(ctx, cbRequestHeaders, id, h.onReqHeaders, "proxy_on_request_headers", uint64(id), uint64(len(headers)), 1)
	if err != nil {
		return Result{}, err
	}
	return Result{Action: proxywasm.Action(a), Local: s.local, Headers: append([][2]string(nil), s.headers...)}, nil
}

// EndStream ends stream id (proxy_on_done, proxy_on_delete).
func (h *Host) EndStream(ctx context.Context, id uint32) error {
	if _, err := h.call(ctx, cbOther, id, h.onDone, "proxy_on_done", uint64(id)); err != nil {
		return err
	}
	_, err := h.call(ctx, cbOther, id, h.onDelete, "proxy_on_delete", uint64(id))
	delete(h.streams, id)
	return err
}

// Request runs a whole request through a new stream of root: create, request
// headers, done, delete.
func (h *Host) Request(ctx context.Context, root uint32, headers [][2]string) (Result, error) {
	id, err := h.NewStream(ctx, root)
	if err != nil {
		return Result{}, err
	}
	res, err := h.RequestHeaders(ctx, id, headers)
	if err != nil {
		return res, err
	}
	return res, h.EndStream(ctx, id)
}

// ReplayHeaders calls proxy_on_request_headers again on stream id with the
// headers it already holds, reusing their encoding: the benchmark loop.
func (h *Host) ReplayHeaders(ctx context.Context, id uint32) (proxywasm.Action, error) {
	s := h.streams[id]
	if s == nil {
		return 0, fmt.Errorf("harness: no stream %d", id)
	}
	s.local = nil
	a, err := h.call(ctx, cbRequestHeaders, id, h.onReqHeaders, "proxy_on_request_headers", uint64(id), uint64(len(s.headers)), 1)
	return proxywasm.Action(a), err
}

// allocate asks the plugin for size bytes and copies data into them; it
// returns the guest address.
func (h *Host) allocate(ctx context.Context, data []byte) (uint32, error) {
	prev := h.phase
	h.phase = phaseAlloc
	h.mstack[0] = uint64(len(data))
	err := h.malloc.CallWithStack(ctx, h.mstack[:])
	h.phase = prev
	if err != nil {
		return 0, fmt.Errorf("proxy_on_memory_allocate: %w", err)
	}
	addr := uint32(h.mstack[0])
	if addr == 0 || !h.mod.Memory().Write(addr, data) {
		return 0, fmt.Errorf("proxy_on_memory_allocate(%d) returned bad address %#x", len(data), addr)
	}
	return addr, nil
}

// randomFill fills b from crypto/rand.
func randomFill(b []byte) { _, _ = rand.Read(b) }
