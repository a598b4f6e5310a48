package extauthz_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// bodyPolicy allows a request whose JSON body says {"ok": true}: it reads
// parsed_body, which skip-request-body-parse leaves out.
const bodyPolicy = `package envoy.authz

default allow := false

allow if input.parsed_body.ok == true
`

// newPluginServerUnstarted is a server of bodyPolicy, not started.
func newPluginServerUnstarted(t *testing.T, mutate func(*testConfig)) *extauthz.Server {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules: map[string]string{"policy.rego": bodyPolicy}, Entrypoints: []string{"envoy/authz/allow"},
	})
	if err != nil {
		t.Fatal(err)
	}
	store := fixture.DemoStore(t)
	cfg := testConfig{
		Config: extauthz.Config{Store: store, HTTPAddr: "-", AdminAddr: "-"},
		Core:   pdp.Config{Engine: fixture.StoreEngine(t, store), Policy: b, EnvoyEntrypoint: "envoy/authz/allow", AuthzEntrypoint: pdp.Disabled},
	}
	mutate(&cfg)
	srv, _, err := cfg.build(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// newPluginServer serves bodyPolicy at envoy/authz/allow, as an
// opa-envoy-plugin user's policy, over real gRPC.
func newPluginServer(t *testing.T, mutate func(*testConfig)) *testServer {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules: map[string]string{"policy.rego": bodyPolicy}, Entrypoints: []string{"envoy/authz/allow"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(c *testConfig) {
		c.Core.Policy = b
		c.Core.EnvoyEntrypoint = "envoy/authz/allow"
		c.Core.AuthzEntrypoint = pdp.Disabled
		if mutate != nil {
			mutate(c)
		}
	})
}

func jsonRequest(body string) *authv3.CheckRequest {
	r := fixture.EnvoyRequest("POST", "/orders", map[string]string{"content-type": "application/json"})
	r.Attributes.Request.Http.Body = body
	return r
}

func allowed(resp *authv3.CheckResponse) bool { return resp.GetStatus().GetCode() == int32(codes.OK) }

// waitLog waits for n decision log lines and returns them decoded.
func waitLog(t *testing.T, ts *testServer, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(ts.log.String(), "\n") < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("decision log line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	if len(out) != n {
		t.Fatalf("decision log has %d lines, want %d", len(out), n)
	}
	return out
}

// TestDryRun: with dry-run a denial is answered OK with an empty
// OkHttpResponse and the decision_id, while the decision log records the
// denial; an allow is unchanged; a request that does not parse is still
// refused, as opa-envoy-plugin does.
func TestDryRun(t *testing.T) {
	ts := newPluginServer(t, func(c *testConfig) { c.Core.DryRun = true })
	ctx := context.Background()

	resp, err := ts.grpc.Check(ctx, jsonRequest(`{"ok": false}`))
	if err != nil {
		t.Fatal(err)
	}
	if !allowed(resp) || resp.GetOkResponse() == nil || resp.GetDeniedResponse() != nil {
		t.Fatalf("dry-run answer to a denial = %v, want OK with an OkHttpResponse", resp)
	}
	if resp.GetDynamicMetadata().GetFields()["decision_id"].GetStringValue() == "" {
		t.Fatalf("dry-run answer lacks decision_id: %v", resp.GetDynamicMetadata())
	}
	resp, err = ts.grpc.Check(ctx, jsonRequest(`{"ok": true}`))
	if err != nil || !allowed(resp) {
		t.Fatalf("allow under dry-run = %v, %v", resp, err)
	}
	evs := waitLog(t, ts, 2)
	if evs[0]["allowed"] != false || evs[1]["allowed"] != true {
		t.Fatalf("decision log %v: want the real decisions, deny then allow", evs)
	}

	resp, err = ts.grpc.Check(ctx, jsonRequest(`{not json`))
	if err != nil || resp.GetStatus().GetCode() != int32(codes.PermissionDenied) || resp.GetDeniedResponse().GetStatus().GetCode() != 400 {
		t.Fatalf("a body that does not parse under dry-run = %v, %v; want the 400 denial", resp, err)
	}

	// Without dry-run the same denial is a denial.
	plain := newPluginServer(t, nil)
	if resp, err := plain.grpc.Check(ctx, jsonRequest(`{"ok": false}`)); err != nil || allowed(resp) {
		t.Fatalf("denial without dry-run = %v, %v", resp, err)
	}
}

// TestSkipRequestBodyParse: the policy sees no parsed_body, a body that
// would not parse is no error, and a body over MaxBodyBytes is not read.
func TestSkipRequestBodyParse(t *testing.T) {
	ctx := context.Background()
	parsing := newPluginServer(t, func(c *testConfig) { c.Core.MaxBodyBytes = 64 })
	skipping := newPluginServer(t, func(c *testConfig) { c.Core.MaxBodyBytes = 64; c.Core.SkipRequestBodyParse = true })

	if resp, err := parsing.grpc.Check(ctx, jsonRequest(`{"ok": true}`)); err != nil || !allowed(resp) {
		t.Fatalf("with the body parsed: %v, %v; want allow", resp, err)
	}
	if resp, err := skipping.grpc.Check(ctx, jsonRequest(`{"ok": true}`)); err != nil || allowed(resp) {
		t.Fatalf("with skip-request-body-parse: %v, %v; want a deny (no parsed_body)", resp, err)
	}

	resp, err := skipping.grpc.Check(ctx, jsonRequest(`{not json`))
	if err != nil || allowed(resp) || resp.GetStatus().GetMessage() != "" {
		t.Fatalf("unparsable body skipped: %v, %v; want a policy deny, no request_parse_error", resp, err)
	}
	if resp, err := parsing.grpc.Check(ctx, jsonRequest(`{not json`)); err != nil || !strings.HasPrefix(resp.GetStatus().GetMessage(), "request_parse_error: ") {
		t.Fatalf("unparsable body parsed: %v, %v; want request_parse_error", resp, err)
	}

	big := jsonRequest(`{"ok": true, "pad": "` + strings.Repeat("x", 200) + `"}`)
	if _, err := skipping.grpc.Check(ctx, big); err != nil {
		t.Fatalf("a large body skipped: %v; want a decision", err)
	}
	if _, err := parsing.grpc.Check(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a large body parsed: %v; want RESOURCE_EXHAUSTED", err)
	}
}

// TestGRPCMessageSizeLimits: a CheckRequest over the receive limit is
// refused by grpc-go with RESOURCE_EXHAUSTED before it reaches the
// policy; one under it is decided.
func TestGRPCMessageSizeLimits(t *testing.T) {
	ts := newPluginServer(t, func(c *testConfig) {
		c.GRPCMaxRecvMsgSize = 4096
		c.Core.SkipRequestBodyParse = true // so that only gRPC's limit applies
	})
	ctx := context.Background()
	if _, err := ts.grpc.Check(ctx, jsonRequest(`{"ok": true}`)); err != nil {
		t.Fatalf("small message: %v", err)
	}
	_, err := ts.grpc.Check(ctx, jsonRequest(strings.Repeat("x", 8192)))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("message over the receive limit: %v; want grpc-go's RESOURCE_EXHAUSTED", err)
	}

	// A send limit below the answer's size fails the answer, not the server.
	tiny := newPluginServer(t, func(c *testConfig) { c.GRPCMaxSendMsgSize = 8 })
	if _, err := tiny.grpc.Check(ctx, jsonRequest(`{"ok": true}`)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("answer over the send limit: %v; want RESOURCE_EXHAUSTED", err)
	}
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	code, _, body := do(t, req)
	return code, body
}

// TestPerformanceMetrics: with enable-performance-metrics the plugin's
// histogram and error counter are on /metrics, with its names, label and
// the configured buckets; without it they are absent.
func TestPerformanceMetrics(t *testing.T) {
	ctx := context.Background()
	ts := newPluginServer(t, func(c *testConfig) {
		c.PerformanceMetrics = true
		c.PerformanceMetricsBuckets = []float64{1e-5, 0.2, 1, 5}
		c.DiagnosticAddr = "127.0.0.1:0"
	})
	for _, body := range []string{`{"ok": true}`, `{"ok": false}`, `{bad`} {
		if _, err := ts.grpc.Check(ctx, jsonRequest(body)); err != nil {
			t.Fatal(err)
		}
	}
	diag := "http://" + ts.srv.Addr("diagnostic").String()
	for _, base := range []string{ts.admin, diag} {
		code, body := getBody(t, base+"/metrics")
		if code != 200 {
			t.Fatalf("%s/metrics: %d", base, code)
		}
		for _, want := range []string{
			`grpc_request_duration_seconds_bucket{handler="check",le="0.2"}`,
			`grpc_request_duration_seconds_bucket{handler="check",le="5"}`,
			`grpc_request_duration_seconds_count{handler="check"} 2`,
			`error_counter{reason="request_parse_error"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s/metrics lacks %s", base, want)
			}
		}
	}

	off := newPluginServer(t, nil)
	if _, err := off.grpc.Check(ctx, jsonRequest(`{"ok": true}`)); err != nil {
		t.Fatal(err)
	}
	if _, body := getBody(t, off.admin+"/metrics"); strings.Contains(body, "grpc_request_duration_seconds") {
		t.Errorf("performance metrics present while disabled")
	}
}

// TestDiagnosticListener: OPA's /health and nexus' probes and metrics are
// served; nothing else (no admin API, no decisions). /health is on the
// HTTP listener too, where OPA's --addr serves it.
func TestDiagnosticListener(t *testing.T) {
	ts := newPluginServer(t, func(c *testConfig) { c.DiagnosticAddr = "127.0.0.1:0" })
	diag := "http://" + ts.srv.Addr("diagnostic").String()
	for _, tt := range []struct {
		path string
		code int
		body string
	}{
		{"/health", 200, "{}"},
		{"/health?plugins", 200, "{}"},
		{"/health?bundles&plugins", 200, "{}"},
		{"/healthz", 200, ""},
		{"/readyz", 200, "ready"},
		{"/metrics", 200, "nexus_"},
		{"/v1/schema", 404, ""},
		{"/v1/relationships", 404, ""},
		{"/allowed", 404, ""},
	} {
		code, body := getBody(t, diag+tt.path)
		if code != tt.code || !strings.Contains(body, tt.body) {
			t.Errorf("GET %s = %d %q, want %d with %q", tt.path, code, body, tt.code, tt.body)
		}
	}
	if code, body := getBody(t, ts.http+"/health?plugins"); code != 200 || strings.TrimSpace(body) != "{}" {
		t.Errorf("GET /health on the HTTP listener = %d %q", code, body)
	}
}

// TestGRPCUnixSocket: addr unix:///path serves ext_authz on a Unix socket,
// replacing a stale socket, as opa-envoy-plugin's addr does, and never
// another file.
func TestGRPCUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := dir + "/nexus.sock"
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = stale.Close() // the socket file stays, as after a crash

	regular := dir + "/data.txt"
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := newPluginServerUnstarted(t, func(c *testConfig) { c.GRPCAddr = "unix://" + regular })
	if err := other.Start(context.Background()); err == nil {
		t.Fatal("Start on a regular file's path succeeded")
	}
	if b, err := os.ReadFile(regular); err != nil || string(b) != "keep" {
		t.Fatalf("the regular file at the socket path was touched: %q, %v", b, err)
	}

	ts := newPluginServer(t, func(c *testConfig) { c.GRPCAddr = "unix://" + sock })
	if a := ts.srv.Addr("grpc"); a == nil || a.Network() != "unix" || a.String() != sock {
		t.Fatalf("grpc listener %v, want the socket %s", a, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := authv3.NewAuthorizationClient(conn).Check(context.Background(), jsonRequest(`{"ok": true}`)); err != nil || !allowed(resp) {
		t.Fatalf("Check over the socket: %v, %v", resp, err)
	}
}

// TestHealthFollowsStore: OPA's /health answers 500 with an error when
// nexus is not ready (here: its store is closed), as /readyz answers 503.
func TestHealthFollowsStore(t *testing.T) {
	ts := newPluginServer(t, func(c *testConfig) { c.DiagnosticAddr = "127.0.0.1:0" })
	diag := "http://" + ts.srv.Addr("diagnostic").String()
	if code, _ := getBody(t, diag+"/health"); code != 200 {
		t.Fatalf("/health = %d before the store closed", code)
	}
	if err := ts.store.Close(); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{diag, ts.http} {
		code, body := getBody(t, base+"/health?plugins")
		if code != 500 || !strings.Contains(body, `"error"`) {
			t.Errorf("%s/health with the store closed = %d %s, want 500 with an error", base, code, body)
		}
	}
}
