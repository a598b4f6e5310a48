package main

import (
	"context"
	"testing"

	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

// BenchmarkRequestHeaders measures one proxy_on_request_headers call of the
// built plugin in the wazero harness, with the snapshot cached: the host
// call, the header map copied into the module, the decision, and the
// resulting host calls (marking an allow, sending a deny).
func BenchmarkRequestHeaders(b *testing.B) {
	tests := []struct {
		name    string
		headers [][2]string
		want    proxywasm.Action
	}{
		{"allow", req("GET", "/t/acme/files/f1", "alice", ""), proxywasm.ActionContinue},
		{"deny", req("DELETE", "/t/acme/files/f1", "bob", ""), proxywasm.ActionPause},
		{"pass", req("GET", "/docs/x", "alice", "acme"), proxywasm.ActionContinue},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			h, root := newPlugin(b, testConfig)
			poll(b, h, root, "200", `"r1"`, mustJSON(b, bigSnapshot(1, 1750)))
			id, err := h.NewStream(ctx, root)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := h.RequestHeaders(ctx, id, tc.headers); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				a, err := h.ReplayHeaders(ctx, id)
				if err != nil || a != tc.want {
					b.Fatalf("action %d, err %v", a, err)
				}
			}
		})
	}
}

// BenchmarkRequest measures a whole stream: context create, request headers,
// done and delete.
func BenchmarkRequest(b *testing.B) {
	ctx := context.Background()
	h, root := newPlugin(b, testConfig)
	poll(b, h, root, "200", `"r1"`, mustJSON(b, testSnapshot(1)))
	hs := req("GET", "/t/acme/files/f1", "alice", "")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Request(ctx, root, hs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVM starts a VM (instantiate, _initialize, configure), loads a
// snapshot of the small data set's size (1,750 subjects) and reports the
// module size and the VM's linear memory.
func BenchmarkVM(b *testing.B) {
	ctx := context.Background()
	big := mustJSON(b, bigSnapshot(1, 1750))
	var mem, memEmpty uint32
	for b.Loop() {
		h, err := newHost(ctx, wasmBytes, hostConfig{Cache: cache})
		if err != nil {
			b.Fatal(err)
		}
		root, ok, err := h.StartPlugin(ctx, nil, []byte(testConfig))
		if err != nil || !ok {
			b.Fatal("start failed", err)
		}
		memEmpty = h.MemorySize()
		poll(b, h, root, "200", `"r1"`, big)
		mem = h.MemorySize()
		h.Close(ctx)
	}
	b.ReportMetric(float64(len(wasmBytes)), "wasm-bytes")
	b.ReportMetric(float64(memEmpty), "mem-bytes/vm-no-snapshot")
	b.ReportMetric(float64(mem), "mem-bytes/vm-1750-subjects")
	b.ReportMetric(float64(len(big)), "snapshot-json-bytes")
}
