// Package harness is a Proxy-Wasm ABI 0.2.1 host on wazero that plays Envoy's
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
//	h, err := harness.New(ctx, wasm, harness.Config{})
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
package harness
