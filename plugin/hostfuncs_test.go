package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

// The host calls Envoy allows while it runs a module's _initialize and while
// it calls proxy_on_memory_allocate: the strictest of the releases that run
// Go c-shared modules (proxy-wasm-cpp-host between its Go SDK change of
// December 2024 and the wider WASI list of April 2026, i.e. Envoy 1.33 to
// 1.38). Every other host call in those phases traps with
// "restricted_callback", failing the VM.
var (
	allowedInit = set(
		"env.proxy_log",
		"wasi_snapshot_preview1.fd_write",
		"wasi_snapshot_preview1.args_sizes_get", "wasi_snapshot_preview1.args_get",
		"wasi_snapshot_preview1.environ_sizes_get", "wasi_snapshot_preview1.environ_get",
		"wasi_snapshot_preview1.fd_prestat_get", "wasi_snapshot_preview1.fd_prestat_dir_name",
		"wasi_snapshot_preview1.clock_time_get",
		"wasi_snapshot_preview1.random_get",
		"wasi_snapshot_preview1.fd_fdstat_get", "wasi_snapshot_preview1.fd_fdstat_set_flags",
	)
	allowedAlloc = set(
		"env.proxy_log",
		"wasi_snapshot_preview1.fd_write",
		"wasi_snapshot_preview1.clock_time_get",
	)
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// WASI errno values the harness returns.
const (
	errnoSuccess = 0
	errnoBadf    = 8
	errnoNosys   = 52
)

type hostFunc func(ctx context.Context, m api.Module, stack []uint64)

// instantiateHost builds the "env" (Proxy-Wasm) and "wasi_snapshot_preview1"
// host modules the plugin imports. An env import the harness does not
// implement is an error (Envoy implements them all; the harness would
// silently misbehave). WASI calls follow proxy-wasm-cpp-host: no arguments,
// no environment, no preopened files, stdout and stderr to the log, and
// ENOSYS for the file system.
func (h *Host) instantiateHost(ctx context.Context, compiled wazero.CompiledModule) error {
	env := h.rt.NewHostModuleBuilder("env")
	wasi := h.rt.NewHostModuleBuilder("wasi_snapshot_preview1")
	envImpl := h.envFuncs()
	wasiImpl := h.wasiFuncs()
	seen := map[string]bool{}
	for _, def := range compiled.ImportedFunctions() {
		module, name, _ := def.Import()
		full := module + "." + name
		if seen[full] {
			continue
		}
		seen[full] = true
		var b wazero.HostModuleBuilder
		var fn hostFunc
		switch module {
		case "env":
			b, fn = env, envImpl[name]
			if fn == nil {
				return fmt.Errorf("harness: plugin imports %s, which the harness does not implement", full)
			}
		case "wasi_snapshot_preview1":
			b, fn = wasi, wasiImpl[name]
			if fn == nil {
				fn = func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoNosys }
			}
		default:
			return fmt.Errorf("harness: plugin imports %s from unknown module %q", full, module)
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(h.guard(full, module == "wasi_snapshot_preview1", fn)), def.ParamTypes(), def.ResultTypes()).
			Export(name)
	}
	if _, err := env.Instantiate(ctx); err != nil {
		return fmt.Errorf("harness: env module: %w", err)
	}
	if _, err := wasi.Instantiate(ctx); err != nil {
		return fmt.Errorf("harness: wasi module: %w", err)
	}
	return nil
}

// guard applies the phase restrictions and counts calls.
func (h *Host) guard(full string, isWASI bool, fn hostFunc) hostFunc {
	return func(ctx context.Context, m api.Module, stack []uint64) {
		switch h.phase {
		case phaseInit:
			h.initCalls[full]++
			if !allowedInit[full] && !h.lenient {
				h.refuse(full)
			}
		case phaseAlloc:
			h.allocCalls[full]++
			if !allowedAlloc[full] && !h.lenient {
				h.refuse(full)
			}
		case phaseCallback:
			if isWASI {
				h.wasiCalls[full]++
			}
		}
		fn(ctx, m, stack)
	}
}

func (h *Host) refuse(full string) {
	h.refused = append(h.refused, h.phase.String()+": "+full)
	panic(fmt.Errorf("%w: %s during %s", errRestricted, full, h.phase))
}

func status(stack []uint64, s proxywasm.Status) { stack[0] = uint64(s) }

func read(m api.Module, ptr, size uint64) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	return m.Memory().Read(uint32(ptr), uint32(size))
}

func readString(m api.Module, ptr, size uint64) (string, bool) {
	b, ok := read(m, ptr, size)
	return string(b), ok
}

// copyOut allocates guest memory for data and writes its address and size to
// the out parameters, as the host does for every call returning bytes.
func (h *Host) copyOut(ctx context.Context, m api.Module, data []byte, ptrPtr, sizePtr uint64) proxywasm.Status {
	var addr uint32
	if len(data) > 0 {
		var err error
		if addr, err = h.allocate(ctx, data); err != nil {
			panic(err)
		}
	}
	mem := m.Memory()
	if !mem.WriteUint32Le(uint32(ptrPtr), addr) || !mem.WriteUint32Le(uint32(sizePtr), uint32(len(data))) {
		return proxywasm.StatusInvalidMemoryAccess
	}
	return proxywasm.StatusOK
}

// rootOf returns the root context of the running callback's context.
func (h *Host) rootOf(id uint32) uint32 {
	if s := h.streams[id]; s != nil {
		return s.root
	}
	return id
}

func (h *Host) envFuncs() map[string]hostFunc {
	return map[string]hostFunc{
		"proxy_log": func(_ context.Context, m api.Module, stack []uint64) {
			msg, ok := readString(m, stack[1], stack[2])
			if !ok {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			h.logs = append(h.logs, LogEntry{Level: int(uint32(stack[0])), Message: msg})
			h.log.Debug("plugin log", "level", uint32(stack[0]), "msg", msg)
			status(stack, proxywasm.StatusOK)
		},
		"proxy_get_current_time_nanoseconds": func(_ context.Context, m api.Module, stack []uint64) {
			if !m.Memory().WriteUint64Le(uint32(stack[0]), uint64(h.now)) {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			status(stack, proxywasm.StatusOK)
		},
		"proxy_get_buffer_bytes": func(ctx context.Context, m api.Module, stack []uint64) {
			var buf []byte
			switch t := proxywasm.BufferType(stack[0]); {
			case t == proxywasm.BufferPluginConfiguration && h.cb == cbConfigure:
				buf = h.pluginConfig
			case t == proxywasm.BufferVMConfiguration && h.cb == cbVMStart:
				buf = h.vmConfig
			case t == proxywasm.BufferHTTPCallResponseBody && h.cb == cbHTTPCallResponse && h.callResp != nil:
				buf = h.callResp.body
			default:
				status(stack, proxywasm.StatusNotFound)
				return
			}
			start, max := uint64(uint32(stack[1])), uint64(uint32(stack[2]))
			if start > uint64(len(buf)) {
				status(stack, proxywasm.StatusBadArgument)
				return
			}
			buf = buf[start:]
			if uint64(len(buf)) > max {
				buf = buf[:max]
			}
			status(stack, h.copyOut(ctx, m, buf, stack[3], stack[4]))
		},
		"proxy_get_header_map_pairs": func(ctx context.Context, m api.Module, stack []uint64) {
			var data []byte
			switch t := proxywasm.MapType(stack[0]); {
			case t == proxywasm.MapRequestHeaders && h.cb == cbRequestHeaders:
				s := h.streams[h.cbCtx]
				if s.encoded == nil {
					s.encoded = proxywasm.EncodePairs(s.headers)
				}
				data = s.encoded
			case t == proxywasm.MapHTTPCallResponseHeaders && h.cb == cbHTTPCallResponse && h.callResp != nil:
				data = h.callResp.headers
			default:
				status(stack, proxywasm.StatusNotFound)
				return
			}
			status(stack, h.copyOut(ctx, m, data, stack[1], stack[2]))
		},
		"proxy_replace_header_map_value": func(_ context.Context, m api.Module, stack []uint64) {
			s := h.requestHeadersOf(proxywasm.MapType(stack[0]))
			if s == nil {
				status(stack, proxywasm.StatusNotFound)
				return
			}
			kb, ok1 := read(m, stack[1], stack[2])
			vb, ok2 := read(m, stack[3], stack[4])
			if !ok1 || !ok2 {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			// Setting a header to the value it already has changes nothing
			// (and keeps the cached encoding, so benchmarks measure the plugin).
			first, count := -1, 0
			for i, kv := range s.headers {
				if kv[0] == string(kb) {
					if first < 0 {
						first = i
					}
					count++
				}
			}
			if count == 1 && s.headers[first][1] == string(vb) {
				status(stack, proxywasm.StatusOK)
				return
			}
			k, v := string(kb), string(vb)
			out := s.headers[:0]
			replaced := false
			for _, kv := range s.headers {
				if kv[0] == k {
					if replaced {
						continue
					}
					kv[1], replaced = v, true
				}
				out = append(out, kv)
			}
			if !replaced {
				out = append(out, [2]string{k, v})
			}
			s.headers, s.encoded = out, nil
			status(stack, proxywasm.StatusOK)
		},
		"proxy_remove_header_map_value": func(_ context.Context, m api.Module, stack []uint64) {
			s := h.requestHeadersOf(proxywasm.MapType(stack[0]))
			if s == nil {
				status(stack, proxywasm.StatusNotFound)
				return
			}
			k, ok := readString(m, stack[1], stack[2])
			if !ok {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			out := s.headers[:0]
			for _, kv := range s.headers {
				if kv[0] != k {
					out = append(out, kv)
				}
			}
			s.headers, s.encoded = out, nil
			status(stack, proxywasm.StatusOK)
		},
		"proxy_send_local_response": func(_ context.Context, m api.Module, stack []uint64) {
			s := h.streams[h.cbCtx]
			if s == nil || h.cb != cbRequestHeaders {
				status(stack, proxywasm.StatusNotFound)
				return
			}
			db, ok1 := read(m, stack[1], stack[2])
			details := string(db)
			body, ok2 := read(m, stack[3], stack[4])
			hb, ok3 := read(m, stack[5], stack[6])
			if !ok1 || !ok2 || !ok3 {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			if l := h.lastLocal; l != nil && l.Status == uint32(stack[0]) && l.Details == details && string(l.Body) == string(body) && string(l.raw) == string(hb) {
				s.local = l // the same reply again: nothing to decode
				status(stack, proxywasm.StatusOK)
				return
			}
			hs, err := decodePairs(hb)
			if err != nil {
				status(stack, proxywasm.StatusParseFailure)
				return
			}
			s.local = &LocalResponse{Status: uint32(stack[0]), Details: details, Body: append([]byte(nil), body...), Headers: hs,
				raw: append([]byte(nil), hb...)}
			h.lastLocal = s.local
			status(stack, proxywasm.StatusOK)
		},
		"proxy_set_tick_period_milliseconds": func(_ context.Context, _ api.Module, stack []uint64) {
			if !h.roots[h.cbCtx] {
				status(stack, proxywasm.StatusBadArgument)
				return
			}
			h.tick[h.cbCtx] = uint32(stack[0])
			status(stack, proxywasm.StatusOK)
		},
		"proxy_http_call": func(_ context.Context, m api.Module, stack []uint64) {
			cluster, ok1 := readString(m, stack[0], stack[1])
			hb, ok2 := read(m, stack[2], stack[3])
			body, ok3 := read(m, stack[4], stack[5])
			if !ok1 || !ok2 || !ok3 {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			hs, err := decodePairs(hb)
			if err != nil {
				status(stack, proxywasm.StatusParseFailure)
				return
			}
			if cluster == "" || lookup(hs, ":method") == "" || lookup(hs, ":path") == "" || lookup(hs, ":authority") == "" {
				status(stack, proxywasm.StatusBadArgument) // Envoy requires all three pseudo-headers
				return
			}
			h.token++
			if !m.Memory().WriteUint32Le(uint32(stack[9]), h.token) {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			h.calls = append(h.calls, HTTPCall{Root: h.rootOf(h.cbCtx), Token: h.token, Cluster: cluster, Headers: hs,
				Body: append([]byte(nil), body...), TimeoutMS: uint32(stack[8])})
			status(stack, proxywasm.StatusOK)
		},
		"proxy_define_metric": func(_ context.Context, m api.Module, stack []uint64) {
			name, ok := readString(m, stack[1], stack[2])
			if !ok {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			id, exists := h.metrics[name]
			if !exists {
				id = uint32(len(h.counters))
				h.metrics[name] = id
				h.counters = append(h.counters, 0)
				h.names = append(h.names, name)
			}
			if !m.Memory().WriteUint32Le(uint32(stack[3]), id) {
				status(stack, proxywasm.StatusInvalidMemoryAccess)
				return
			}
			status(stack, proxywasm.StatusOK)
		},
		"proxy_increment_metric": func(_ context.Context, _ api.Module, stack []uint64) {
			id := uint32(stack[0])
			if int(id) >= len(h.counters) {
				status(stack, proxywasm.StatusNotFound)
				return
			}
			h.counters[id] += int64(stack[1])
			status(stack, proxywasm.StatusOK)
		},
	}
}

// requestHeadersOf returns the stream whose request headers the running
// callback may change, or nil.
func (h *Host) requestHeadersOf(t proxywasm.MapType) *stream {
	if t != proxywasm.MapRequestHeaders || h.cb != cbRequestHeaders {
		return nil
	}
	return h.streams[h.cbCtx]
}

func decodePairs(b []byte) ([][2]string, error) {
	p, err := proxywasm.ParsePairs(b)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	p.Each(func(k, v []byte) bool {
		out = append(out, [2]string{string(k), string(v)})
		return true
	})
	return out, nil
}

func (h *Host) wasiFuncs() map[string]hostFunc {
	zero2 := func(_ context.Context, m api.Module, stack []uint64) {
		mem := m.Memory()
		mem.WriteUint32Le(uint32(stack[0]), 0)
		mem.WriteUint32Le(uint32(stack[1]), 0)
		stack[0] = errnoSuccess
	}
	ok := func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoSuccess }
	badf := func(_ context.Context, _ api.Module, stack []uint64) { stack[0] = errnoBadf }
	return map[string]hostFunc{
		"args_sizes_get":    zero2,
		"environ_sizes_get": zero2,
		"args_get":          ok,
		"environ_get":       ok,
		"sched_yield":       ok,
		"clock_time_get": func(_ context.Context, m api.Module, stack []uint64) {
			t := uint64(h.now)
			if uint32(stack[0]) != 0 { // anything but realtime: monotonic
				t = uint64(time.Since(h.monoBase))
			}
			m.Memory().WriteUint64Le(uint32(stack[2]), t)
			stack[0] = errnoSuccess
		},
		"random_get": func(_ context.Context, m api.Module, stack []uint64) {
			b, ok := m.Memory().Read(uint32(stack[0]), uint32(stack[1]))
			if !ok {
				stack[0] = 21 // EFAULT
				return
			}
			randomFill(b)
			stack[0] = errnoSuccess
		},
		"fd_write": func(_ context.Context, m api.Module, stack []uint64) {
			fd := uint32(stack[0])
			if fd != 1 && fd != 2 {
				stack[0] = errnoBadf
				return
			}
			mem := m.Memory()
			var out []byte
			for i := uint32(0); i < uint32(stack[2]); i++ {
				iov, _ := mem.Read(uint32(stack[1])+8*i, 8)
				if len(iov) < 8 {
					stack[0] = 21
					return
				}
				b, _ := mem.Read(binary.LittleEndian.Uint32(iov), binary.LittleEndian.Uint32(iov[4:]))
				out = append(out, b...)
			}
			h.logs = append(h.logs, LogEntry{Level: -int(fd), Message: string(out)})
			h.log.Debug("plugin output", "fd", fd, "text", string(out))
			mem.WriteUint32Le(uint32(stack[3]), uint32(len(out)))
			stack[0] = errnoSuccess
		},
		"fd_fdstat_get": func(_ context.Context, m api.Module, stack []uint64) {
			// As proxy-wasm-cpp-host: stdout and stderr only, rights FD_WRITE.
			if fd := uint32(stack[0]); fd != 1 && fd != 2 {
				stack[0] = errnoBadf
				return
			}
			var st [24]byte
			binary.LittleEndian.PutUint64(st[8:], 64)
			m.Memory().Write(uint32(stack[1]), st[:])
			stack[0] = errnoSuccess
		},
		"fd_prestat_get":      badf,
		"fd_prestat_dir_name": badf,
		"poll_oneoff": func(_ context.Context, _ api.Module, stack []uint64) {
			// ENOSYS, as Envoy up to 1.38 answers: the Go runtime treats it as
			// fatal, so a plugin that ever sleeps or waits on a timer dies
			// here as it would in Envoy. The call is counted in WASICalls.
			stack[0] = errnoNosys
		},
		"proc_exit": func(_ context.Context, _ api.Module, stack []uint64) {
			panic(fmt.Errorf("harness: plugin called proc_exit(%d)", uint32(stack[0])))
		},
	}
}
