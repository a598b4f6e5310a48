package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

// wasmBytes is plugin.wasm built by TestMain with the standard toolchain;
// cache holds its compiled code for every test's VM, on disk so that later
// runs (compiling 3.7 MB of Go-built Wasm is the slow part, above all under
// -race) skip it. Entries are keyed by the module's hash and wazero's version.
var (
	wasmBytes []byte
	cache     wazero.CompilationCache
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nexus-plugin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := filepath.Join(dir, "plugin.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building plugin.wasm: %v\n%s", err, b)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	wasmBytes, err = os.ReadFile(out)
	os.RemoveAll(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cache, err = wazero.NewCompilationCacheWithDir(filepath.Join(os.TempDir(), "nexus-plugin-wazero-cache"))
	if err != nil {
		cache = wazero.NewCompilationCache()
	}
	code := m.Run()
	cache.Close(context.Background())
	os.Exit(code)
}

const testConfig = `{
  "pdp_cluster": "nexus_admin",
  "token": "s3cret",
  "refresh_period_ms": 1000,
  "max_age_ms": 10000,
  "subject": {"header": "x-user-id"},
  "tenant": {"header": "x-tenant-id"},
  "routes": [
    {"method": "GET",    "path": "/t/{tenant}/files/*",  "action": "read",  "resource_type": "file"},
    {"method": "DELETE", "path": "/t/{tenant}/files/*",  "action": "delete", "resource_type": "file"},
    {"method": "GET",    "path": "/docs/**",             "action": "read",  "resource_type": "doc"},
    {"method": "*",      "path": "/reports/*",           "action": "view",  "resource_type": "report"}
  ]
}`

func testSnapshot(rev uint64) *api.EdgeSnapshot {
	return &api.EdgeSnapshot{
		Version:       api.EdgeSnapshotVersion,
		Revision:      rev,
		GeneratedAt:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		ResourceTypes: map[string]string{"file": api.ModeRBAC, "report": api.ModeRBAC, "doc": api.ModeReBAC},
		Roles: map[string][]string{
			"admin":  {"file:*", "report:*"},
			"viewer": {"file:read"},
		},
		Assignments: map[string]map[string][]string{
			"alice": {"acme": {"admin"}},
			"bob":   {"acme": {"viewer"}, "globex": {"admin"}},
			"carol": {},
		},
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newPlugin starts the built plugin in a fresh VM with cfg.
func newPlugin(t testing.TB, cfg string) (*Host, uint32) {
	t.Helper()
	ctx := context.Background()
	h, err := newHost(ctx, wasmBytes, hostConfig{Cache: cache})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(ctx) })
	root, ok, err := h.StartPlugin(ctx, nil, []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("proxy_on_configure refused the configuration; logs: %v", h.Logs())
	}
	return h, root
}

// poll ticks root and answers its snapshot request with status, etag, body;
// it returns the request the plugin made.
func poll(t testing.TB, h *Host, root uint32, status, etag string, body []byte) HTTPCall {
	t.Helper()
	ctx := context.Background()
	if err := h.Tick(ctx, root); err != nil {
		t.Fatal(err)
	}
	calls := h.Calls()
	if len(calls) != 1 {
		t.Fatalf("after a tick: %d pending calls, want 1", len(calls))
	}
	hs := [][2]string{{":status", status}, {"content-type", "application/json"}}
	if etag != "" {
		hs = append(hs, [2]string{"etag", etag})
	}
	if err := h.Respond(ctx, calls[0].Token, hs, body); err != nil {
		t.Fatal(err)
	}
	return calls[0]
}

func req(method, path, user, tenant string, extra ...[2]string) [][2]string {
	hs := [][2]string{{":method", method}, {":path", path}, {":authority", "app"}, {":scheme", "http"}}
	if user != "" {
		hs = append(hs, [2]string{"x-user-id", user})
	}
	if tenant != "" {
		hs = append(hs, [2]string{"x-tenant-id", tenant})
	}
	return append(hs, extra...)
}

type want int

const (
	wantAllow want = iota
	wantDeny
	wantPass
)

func check(t *testing.T, res Result, w want, reason string) {
	t.Helper()
	switch w {
	case wantAllow:
		if res.Action != proxywasm.ActionContinue || res.Local != nil || res.Header("x-nexus-decision") != "edge-allow" {
			t.Fatalf("want edge allow, got action %d local %+v headers %v", res.Action, res.Local, res.Headers)
		}
	case wantDeny:
		if res.Local == nil || res.Local.Status != 403 || res.Action != proxywasm.ActionPause {
			t.Fatalf("want local 403, got action %d local %+v", res.Action, res.Local)
		}
		if got := res.Local.Header("x-nexus-reason"); got != reason {
			t.Fatalf("deny reason %q, want %q", got, reason)
		}
		if !strings.Contains(string(res.Local.Body), reason) {
			t.Fatalf("deny body %q lacks reason %q", res.Local.Body, reason)
		}
	case wantPass:
		if res.Action != proxywasm.ActionContinue || res.Local != nil || res.Header("x-nexus-decision") != "" {
			t.Fatalf("want untouched pass, got action %d local %+v headers %v", res.Action, res.Local, res.Headers)
		}
	}
}

func TestDecisions(t *testing.T) {
	h, root := newPlugin(t, testConfig)
	call := poll(t, h, root, "200", `"r1"`, mustJSON(t, testSnapshot(1)))
	if call.Cluster != "nexus_admin" || call.Header(":path") != "/v1/edge/snapshot" || call.Header(":method") != "GET" ||
		call.Header("authorization") != "Bearer s3cret" || call.Header("if-none-match") != "" {
		t.Fatalf("snapshot request: %+v", call)
	}
	tests := []struct {
		name    string
		headers [][2]string
		want    want
		reason  string
	}{
		{"admin reads", req("GET", "/t/acme/files/f1", "alice", ""), wantAllow, ""},
		{"admin deletes", req("DELETE", "/t/acme/files/f1?x=1", "alice", ""), wantAllow, ""},
		{"viewer reads", req("GET", "/t/acme/files/f1", "bob", ""), wantAllow, ""},
		{"viewer may not delete", req("DELETE", "/t/acme/files/f1", "bob", ""), wantDeny, "no_grant"},
		{"no role in tenant", req("GET", "/t/initech/files/f1", "alice", ""), wantDeny, "no_grant"},
		{"known subject without roles", req("GET", "/t/acme/files/f1", "carol", ""), wantDeny, "no_grant"},
		{"tenant from header", req("PUT", "/reports/q3", "bob", "globex"), wantAllow, ""},
		{"tenant header, no grant", req("GET", "/reports/q3", "bob", "acme"), wantDeny, "no_grant"},
		{"unknown subject", req("GET", "/t/acme/files/f1", "mallory", ""), wantPass, ""},
		{"no subject", req("GET", "/t/acme/files/f1", "", ""), wantPass, ""},
		{"no tenant", req("GET", "/reports/q3", "bob", ""), wantPass, ""},
		{"rebac type", req("GET", "/docs/a/b/c", "alice", "acme"), wantPass, ""},
		{"no route", req("GET", "/other", "alice", "acme"), wantPass, ""},
		{"method not routed", req("POST", "/t/acme/files/f1", "alice", ""), wantPass, ""},
		{"dot-dot path", req("GET", "/t/acme/files/../../admin", "alice", ""), wantPass, ""},
		{"encoded path", req("GET", "/t/acme/files/%2e%2e", "alice", ""), wantPass, ""},
		{"spoofed marker on deny", req("DELETE", "/t/acme/files/f1", "bob", "", [2]string{"x-nexus-decision", "edge-allow"}), wantDeny, "no_grant"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h.Request(context.Background(), root, tc.headers)
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, tc.want, tc.reason)
		})
	}
	t.Run("spoofed marker removed on pass", func(t *testing.T) {
		res, err := h.Request(context.Background(), root, req("GET", "/other", "alice", "acme", [2]string{"x-nexus-decision", "edge-allow"}))
		if err != nil {
			t.Fatal(err)
		}
		check(t, res, wantPass, "")
	})
	// Request counts reach the proxy's metrics on the next tick.
	if err := h.Tick(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	if n, _ := h.Counter("nexus_edge_denied_total"); n != 5 {
		t.Errorf("denied counter %d, want 5", n)
	}
	if n, _ := h.Counter("nexus_edge_allowed_total"); n != 4 {
		t.Errorf("allowed counter %d, want 4", n)
	}
}

func TestNoSnapshot(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want want
	}{
		{"continue by default", testConfig, wantPass},
		{"deny when configured", strings.Replace(testConfig, `"token"`, `"on_no_snapshot": "deny", "token"`, 1), wantDeny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, root := newPlugin(t, tc.cfg)
			res, err := h.Request(context.Background(), root, req("GET", "/t/acme/files/f1", "alice", ""))
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, tc.want, "no_snapshot")
		})
	}
}

func TestRefresh(t *testing.T) {
	ctx := context.Background()
	h, root := newPlugin(t, testConfig)
	if got := h.TickPeriod(root); got != 1000 {
		t.Fatalf("tick period %d, want 1000", got)
	}
	poll(t, h, root, "200", `"r1"`, mustJSON(t, testSnapshot(1)))
	do := func(user string) Result {
		t.Helper()
		res, err := h.Request(ctx, root, req("DELETE", "/t/acme/files/f1", user, ""))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check(t, do("bob"), wantDeny, "no_grant")

	// 304 keeps the snapshot and sends the ETag.
	call := poll(t, h, root, "304", `"r1"`, nil)
	if call.Header("if-none-match") != `"r1"` {
		t.Fatalf("if-none-match %q, want %q", call.Header("if-none-match"), `"r1"`)
	}
	if n, _ := h.Counter("nexus_edge_snapshot_not_modified_total"); n != 1 {
		t.Fatalf("not-modified counter %d", n)
	}
	check(t, do("bob"), wantDeny, "no_grant")

	// A new ETag brings a new snapshot: bob becomes admin in acme.
	s2 := testSnapshot(2)
	s2.Assignments["bob"]["acme"] = []string{"admin"}
	poll(t, h, root, "200", `"r2"`, mustJSON(t, s2))
	check(t, do("bob"), wantAllow, "")

	// Bad snapshots are ignored and counted; the last good one stays.
	bad := testSnapshot(3)
	bad.Assignments["bob"]["acme"] = []string{"no-such-role"}
	for i, body := range [][]byte{[]byte(`{"version":1,`), mustJSON(t, bad), []byte(`{"version":2}`)} {
		poll(t, h, root, "200", fmt.Sprintf(`"bad%d"`, i), body)
	}
	if n, _ := h.Counter("nexus_edge_snapshot_rejected_total"); n != 3 {
		t.Fatalf("rejected counter %d, want 3", n)
	}
	check(t, do("bob"), wantAllow, "")
	// The ETag of the rejected snapshots was not taken.
	call = poll(t, h, root, "304", `"r2"`, nil)
	if call.Header("if-none-match") != `"r2"` {
		t.Fatalf("if-none-match %q after bad snapshots, want %q", call.Header("if-none-match"), `"r2"`)
	}

	// Failures (no reply, 500) are counted and change nothing.
	if err := h.Tick(ctx, root); err != nil {
		t.Fatal(err)
	}
	if err := h.Fail(ctx, h.Calls()[0].Token); err != nil {
		t.Fatal(err)
	}
	poll(t, h, root, "500", "", []byte("oops"))
	if n, _ := h.Counter("nexus_edge_snapshot_fetch_failures_total"); n != 2 {
		t.Fatalf("fetch failure counter %d, want 2", n)
	}
	check(t, do("bob"), wantAllow, "")
}

func TestStaleSnapshot(t *testing.T) {
	ctx := context.Background()
	h, root := newPlugin(t, testConfig)
	poll(t, h, root, "200", `"r1"`, mustJSON(t, testSnapshot(1)))
	h.Advance(9 * time.Second)
	res, err := h.Request(ctx, root, req("GET", "/t/acme/files/f1", "alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	check(t, res, wantAllow, "")
	h.Advance(2 * time.Second) // 11 s > max_age_ms 10000
	for _, user := range []string{"alice", "bob"} {
		res, err := h.Request(ctx, root, req("DELETE", "/t/acme/files/f1", user, ""))
		if err != nil {
			t.Fatal(err)
		}
		check(t, res, wantPass, "")
	}
	// A 304 confirms the snapshot again.
	poll(t, h, root, "304", `"r1"`, nil)
	res, err = h.Request(ctx, root, req("DELETE", "/t/acme/files/f1", "bob", ""))
	if err != nil {
		t.Fatal(err)
	}
	check(t, res, wantDeny, "no_grant")
}

func TestReplyAfterStreamEnded(t *testing.T) {
	ctx := context.Background()
	h, root := newPlugin(t, testConfig)
	if err := h.Tick(ctx, root); err != nil {
		t.Fatal(err)
	}
	token := h.Calls()[0].Token
	// A stream starts and ends while the snapshot request is in flight.
	id, err := h.NewStream(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.RequestHeaders(ctx, id, req("GET", "/t/acme/files/f1", "alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	check(t, res, wantPass, "")
	if err := h.EndStream(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A tick while the call is in flight sends no second request.
	if err := h.Tick(ctx, root); err != nil {
		t.Fatal(err)
	}
	if n := len(h.Calls()); n != 1 {
		t.Fatalf("%d pending calls, want 1", n)
	}
	if err := h.Respond(ctx, token, [][2]string{{":status", "200"}, {"etag", `"r1"`}}, mustJSON(t, testSnapshot(1))); err != nil {
		t.Fatal(err)
	}
	res, err = h.Request(ctx, root, req("GET", "/t/acme/files/f1", "alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	check(t, res, wantAllow, "")

	// A reply nobody waits for any more (duplicate token, or to a root that is
	// gone) is ignored.
	if err := h.RespondTo(ctx, root, token, [][2]string{{":status", "200"}}, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if n, _ := h.Counter("nexus_edge_snapshot_stale_replies_total"); n != 1 {
		t.Fatalf("stale replies %d, want 1", n)
	}
	if err := h.DeleteRoot(ctx, root); err != nil {
		t.Fatal(err)
	}
	if err := h.RespondTo(ctx, root, token+1, [][2]string{{":status", "200"}}, mustJSON(t, testSnapshot(9))); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfig(t *testing.T) {
	tests := []struct {
		name, cfg, wantLog string
	}{
		{"not json", `{`, "bad plugin configuration"},
		{"no cluster", `{"subject":{"header":"x"},"tenant":{"header":"t"},"routes":[{"path":"/","action":"a","resource_type":"r"}]}`, "pdp_cluster is required"},
		{"unknown field", `{"pdp_cluster":"c","subjekt":{}}`, "unknown field"},
		{"no routes", `{"pdp_cluster":"c","subject":{"header":"x"}}`, "at least one route"},
		{"bad pattern", `{"pdp_cluster":"c","subject":{"header":"x"},"routes":[{"path":"/**/x/{tenant}","action":"a","resource_type":"r"}]}`, `"**" must be the last segment`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			h, err := newHost(ctx, wasmBytes, hostConfig{Cache: cache})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(ctx)
			_, ok, err := h.StartPlugin(ctx, nil, []byte(tc.cfg))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t.Fatal("proxy_on_configure accepted a bad configuration")
			}
			logged := slices.ContainsFunc(h.Logs(), func(e LogEntry) bool {
				return e.Level == int(proxywasm.LogError) && strings.Contains(e.Message, tc.wantLog)
			})
			if !logged {
				t.Fatalf("no error log containing %q: %v", tc.wantLog, h.Logs())
			}
		})
	}
}

// TestStrictInitialize checks the module starts under Envoy's restrictions and
// records which host calls _initialize and allocation make.
func TestStrictInitialize(t *testing.T) {
	h, root := newPlugin(t, testConfig)
	poll(t, h, root, "200", `"r1"`, mustJSON(t, testSnapshot(1)))
	if r := h.Refused(); len(r) != 0 {
		t.Fatalf("refused host calls: %v", r)
	}
	for name := range h.InitCalls() {
		if strings.HasPrefix(name, "env.") && name != "env.proxy_log" {
			t.Errorf("_initialize called %s", name)
		}
	}
	if c := h.AllocCalls(); len(c) != 0 {
		t.Errorf("proxy_on_memory_allocate made host calls: %v", c)
	}
	t.Logf("_initialize host calls: %v", h.InitCalls())
}

// bigSnapshot is a snapshot the size of the small benchmark data set:
// users subjects spread over 11 tenants, three roles each.
func bigSnapshot(rev uint64, users int) *api.EdgeSnapshot {
	s := testSnapshot(rev)
	for i := 0; i < users; i++ {
		s.Assignments[fmt.Sprintf("user%d", i)] = map[string][]string{
			fmt.Sprintf("tenant%d", i%11):     {"viewer"},
			fmt.Sprintf("tenant%d", (i+1)%11): {"admin", "viewer"},
		}
	}
	return s
}

// TestManyRequests runs 100,000 requests (allow, deny and pass mixed, with
// snapshot polls and reloads between them) and checks the VM's memory does
// not grow and the plugin never sleeps.
func TestManyRequests(t *testing.T) {
	ctx := context.Background()
	h, root := newPlugin(t, testConfig)
	reqs := [][][2]string{
		req("GET", "/t/acme/files/f1", "alice", ""),
		req("DELETE", "/t/acme/files/f1", "bob", ""),
		req("GET", "/docs/x", "alice", "acme"),
	}
	big := mustJSON(t, bigSnapshot(1, 1750))
	poll(t, h, root, "200", `"r"`, big)
	run := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			res, err := h.Request(ctx, root, reqs[i%len(reqs)])
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			if i%len(reqs) == 1 && res.Local == nil {
				t.Fatalf("request %d: no deny", i)
			}
			switch {
			case i%5000 == 0: // a new snapshot
				h.Advance(time.Second)
				poll(t, h, root, "200", fmt.Sprintf(`"r%d"`, i), big)
			case i%500 == 0:
				h.Advance(time.Second)
				poll(t, h, root, "304", "", nil)
			}
		}
	}
	// The warm-up takes the Go heap to its steady size: the collector runs
	// its first cycles only once the heap reaches its initial goal (4 MiB).
	const warm = 50_000
	run(0, warm)
	before := h.MemorySize()
	const n = 100_000
	run(warm, warm+n)
	after := h.MemorySize()
	if after > before {
		t.Fatalf("memory grew from %d to %d bytes over %d requests", before, after, n)
	}
	total := warm + n
	if err := h.Tick(ctx, root); err != nil { // flushes the request counts
		t.Fatal(err)
	}
	if got, _ := h.Counter("nexus_edge_allowed_total"); got != int64((total+2)/3) {
		t.Errorf("allowed %d, want %d", got, (total+2)/3)
	}
	if got, _ := h.Counter("nexus_edge_denied_total"); got != int64((total+1)/3) {
		t.Errorf("denied %d, want %d", got, (total+1)/3)
	}
	if c := h.WASICalls()["wasi_snapshot_preview1.poll_oneoff"]; c != 0 {
		t.Errorf("plugin slept %d times (poll_oneoff)", c)
	}
	t.Logf("memory %d bytes before, %d after; WASI calls in callbacks: %v", before, after, h.WASICalls())
}

// TestVMsInParallel runs one VM per goroutine, as Envoy runs one per worker
// thread, all from one compiled module: VMs share nothing but the compiled
// code.
func TestVMsInParallel(t *testing.T) {
	const vms, requests = 4, 2000
	snap := mustJSON(t, testSnapshot(1))
	errs := make(chan error, vms)
	for w := 0; w < vms; w++ {
		go func() {
			errs <- func() error {
				ctx := context.Background()
				h, err := newHost(ctx, wasmBytes, hostConfig{Cache: cache})
				if err != nil {
					return err
				}
				defer h.Close(ctx)
				root, ok, err := h.StartPlugin(ctx, nil, []byte(testConfig))
				if err != nil || !ok {
					return fmt.Errorf("start: ok %v err %v", ok, err)
				}
				if err := h.Tick(ctx, root); err != nil {
					return err
				}
				if err := h.Respond(ctx, h.Calls()[0].Token, [][2]string{{":status", "200"}, {"etag", `"r1"`}}, snap); err != nil {
					return err
				}
				for i := 0; i < requests; i++ {
					res, err := h.Request(ctx, root, req("DELETE", "/t/acme/files/f1", "bob", ""))
					if err != nil {
						return err
					}
					if res.Local == nil || res.Local.Status != 403 {
						return fmt.Errorf("request %d: want 403, got %+v", i, res.Local)
					}
				}
				return nil
			}()
		}()
	}
	for w := 0; w < vms; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
