package extauthz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

type testServer struct {
	srv   *extauthz.Server
	pdp   *pdp.PDP
	store *datastore.BoltStore
	grpc  authv3.AuthorizationClient
	conn  *grpc.ClientConn
	http  string // base URL of the HTTP listener
	admin string // base URL of the admin listener
	log   *fixture.SyncBuffer
}

// testConfig is what a test server is built from: the server's
// configuration and the decision core's (Core).
type testConfig struct {
	extauthz.Config
	Core pdp.Config
}

// build builds the decision core of c, as nexus serve does (over the
// server's store, with its logger and registry), and a server over it, not started. The core
// is closed when the test ends, after any shutdown of the server that a
// cleanup registered later does.
func (c testConfig) build(tb testing.TB) (*extauthz.Server, *pdp.PDP, error) {
	tb.Helper()
	if c.Registerer == nil {
		reg := extauthz.NewRegistry()
		c.Registerer = reg
		if c.Gatherer == nil {
			c.Gatherer = reg
		}
	}
	core := c.Core
	if core.Store == nil && c.Store != nil {
		core.Store = c.Store
	}
	if c.Store != nil {
		core.Relations = c.Store
	}
	if core.Logger == nil {
		core.Logger = c.Logger
	}
	if core.Registerer == nil {
		core.Registerer = c.Registerer
	}
	p, err := pdp.New(context.Background(), core)
	if err != nil {
		return nil, nil, err
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	c.PDP = p
	srv, err := extauthz.New(c.Config)
	return srv, p, err
}

// newTestServer starts a real server on loopback: a bbolt file with the
// drive schema and demo tuples, the compiled default policy under wazero,
// and real gRPC and HTTP listeners.
func newTestServer(tb testing.TB, mutate func(*testConfig)) *testServer {
	tb.Helper()
	ctx := context.Background()
	store := fixture.DemoStore(tb)
	ts := &testServer{store: store, log: &fixture.SyncBuffer{}}
	cfg := testConfig{
		Config: extauthz.Config{
			Store:    store,
			GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
			AdminInsecure: true, // tests of the token set AdminToken
			AppAPIKey:     testAppKey,
		},
		Core: pdp.Config{Engine: fixture.StoreEngine(tb, store), Policy: fixture.Bundle(tb), DecisionLog: ts.log},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, p, err := cfg.build(tb)
	if err != nil {
		tb.Fatal(err)
	}
	ts.pdp = p
	if err := srv.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// A client that gave up on a request while dialling keeps the new
		// connection unused, and the HTTP server waits up to five seconds
		// for such a connection before it counts as idle: close them.
		http.DefaultClient.CloseIdleConnections()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			tb.Errorf("shutdown: %v", err)
		}
	})
	ts.srv = srv
	if a := srv.Addr("grpc"); a != nil {
		conn, err := grpc.NewClient(a.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = conn.Close() })
		ts.conn = conn
		ts.grpc = authv3.NewAuthorizationClient(conn)
	}
	if a := srv.Addr("http"); a != nil {
		ts.http = "http://" + a.String()
	}
	if a := srv.Addr("admin"); a != nil {
		ts.admin = "http://" + a.String()
	}
	return ts
}

// putPolicy compiles modules with entrypoints into a bundle of revision
// and loads it through the admin API; it returns the answer.
func putPolicy(t *testing.T, ts *testServer, revision string, modules map[string]string, entrypoints ...string) (int, string) {
	t.Helper()
	b, err := compiler.Compile(context.Background(), compiler.Options{Modules: modules, Entrypoints: entrypoints, Revision: revision})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, ts.admin+"/v1/policy", &buf)
	status, _, body := do(t, req)
	return status, body
}

func headerValue(hs []*corev3.HeaderValueOption, key string) string {
	for _, h := range hs {
		if h.GetHeader().GetKey() == key {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

func TestGRPCCheck(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name       string
		method     string
		path       string
		headers    map[string]string
		wantAllow  bool
		wantStatus int    // HTTP status of a denial
		wantReason string // x-nexus-decision, or in the body of a denial
	}{
		{"rbac-tenant-admin", "DELETE", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"}, true, 0, "rbac"},
		{"rebac-folder-three-up", "GET", "/files/report.pdf", map[string]string{"x-user": "bob"}, true, 0, "rebac"},
		{"rebac-no-write", "PUT", "/files/report.pdf", map[string]string{"x-user": "bob"}, false, 403, "no_grant"},
		{"group-editor-writes", "PUT", "/folders/q3", map[string]string{"x-user": "frank"}, true, 0, "rebac"},
		{"stranger", "GET", "/files/report.pdf", map[string]string{"x-user": "carol"}, false, 403, "no_grant"},
		{"tenant-from-header", "GET", "/files/report.pdf", map[string]string{"x-user": "erin", "x-tenant": "acme"}, true, 0, "rbac"},
		{"no-subject", "GET", "/files/report.pdf", nil, false, 401, "no subject"},
		{"no-route", "GET", "/admin", map[string]string{"x-user": "alice"}, false, 403, "no route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest(tt.method, tt.path, tt.headers))
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			allowed := resp.GetStatus().GetCode() == int32(codes.OK)
			if allowed != tt.wantAllow {
				t.Fatalf("allowed = %v, want %v (%v)", allowed, tt.wantAllow, resp)
			}
			if tt.wantAllow {
				ok := resp.GetOkResponse()
				if got := headerValue(ok.GetHeaders(), "x-nexus-decision"); got != tt.wantReason {
					t.Fatalf("x-nexus-decision = %q, want %q", got, tt.wantReason)
				}
				if got := headerValue(ok.GetHeaders(), "x-nexus-subject"); got != tt.headers["x-user"] {
					t.Fatalf("x-nexus-subject = %q", got)
				}
				return
			}
			if resp.GetStatus().GetCode() != int32(codes.PermissionDenied) {
				t.Fatalf("gRPC status %v, want PermissionDenied", resp.GetStatus())
			}
			den := resp.GetDeniedResponse()
			if int(den.GetStatus().GetCode()) != tt.wantStatus {
				t.Fatalf("HTTP status %d, want %d", den.GetStatus().GetCode(), tt.wantStatus)
			}
			if !strings.Contains(den.GetBody(), tt.wantReason) {
				t.Fatalf("body %q lacks %q", den.GetBody(), tt.wantReason)
			}
			// As opa-envoy-plugin answers a decision: no message.
			if msg := resp.GetStatus().GetMessage(); msg != "" {
				t.Fatalf("status message %q, want none", msg)
			}
		})
	}
}

// Invalid UTF-8 cannot reach the handler over gRPC (proto3 strings must be
// UTF-8, and Envoy replaces such bytes with '!'); it is covered over HTTP.
func TestGRPCBadInputDeniesWithReason(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name string
		req  *authv3.CheckRequest
	}{
		{"bad-path", fixture.EnvoyRequest("GET", "/files/%zz", map[string]string{"x-user": "bob"})},
		{"semicolon-query", fixture.EnvoyRequest("GET", "/files/report.pdf?a=1;b=2", map[string]string{"x-user": "bob"})},
		{"bad-query-escape", fixture.EnvoyRequest("GET", "/files/report.pdf?a=%zz", map[string]string{"x-user": "bob"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := ts.grpc.Check(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Check returned a transport error %v; want a denial", err)
			}
			// opa-envoy-plugin's answer to a request that does not parse.
			if resp.GetStatus().GetCode() != int32(codes.PermissionDenied) || !strings.HasPrefix(resp.GetStatus().GetMessage(), "request_parse_error: ") {
				t.Fatalf("status %v, want PermissionDenied with a request_parse_error message", resp.GetStatus())
			}
			den := resp.GetDeniedResponse()
			if den.GetStatus().GetCode() != 400 || den.GetBody() != resp.GetStatus().GetMessage() {
				t.Fatalf("denial %v, want 400 with the request_parse_error body", den)
			}
		})
	}
}

// TestGRPCUnreadBadBodyDecided: the default policy never reads the body
// (parsed_body), so a body that is not JSON is never parsed and the
// request gets the policy's decision, where a policy that reads it
// answers request_parse_error (TestSkipRequestBodyParse).
func TestGRPCUnreadBadBodyDecided(t *testing.T) {
	ts := newTestServer(t, nil)
	r := fixture.EnvoyRequest("POST", "/files/report.pdf", map[string]string{"x-user": "bob", "content-type": "application/json"})
	r.Attributes.Request.Http.Body = "{not json"
	resp, err := ts.grpc.Check(context.Background(), r)
	if err != nil {
		t.Fatalf("Check returned a transport error %v", err)
	}
	if strings.HasPrefix(resp.GetStatus().GetMessage(), "request_parse_error") || resp.GetDeniedResponse().GetStatus().GetCode() == 400 {
		t.Fatalf("status %v, denial %v: the unread body was parsed", resp.GetStatus(), resp.GetDeniedResponse())
	}
	good := fixture.EnvoyRequest("POST", "/files/report.pdf", map[string]string{"x-user": "bob", "content-type": "application/json"})
	good.Attributes.Request.Http.Body = `{"ok": true}`
	want, err := ts.grpc.Check(context.Background(), good)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus().GetCode() != want.GetStatus().GetCode() {
		t.Fatalf("bad body decided %v, a good one %v: want the same decision", resp.GetStatus(), want.GetStatus())
	}
}

func TestGRPCHealth(t *testing.T) {
	ts := newTestServer(t, nil)
	resp, err := healthpb.NewHealthClient(ts.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
}

// testAppKey is the application API key of newTestServer's servers.
const testAppKey = "test-app-key-0123456789"

// post sends body as JSON with the application API key (unless header
// names another Content-Type or Authorization).
func post(t *testing.T, url, body string, header ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAppKey)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return answer(t, resp)
}

// answer reads resp's status, headers and body, and closes it.
func answer(t *testing.T, resp *http.Response) (int, http.Header, string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestForwardAuth(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name       string
		path       string
		headers    map[string]string
		wantStatus int
		wantHeader string // x-nexus-decision
	}{
		{"nginx-allow", "/ext_authz", map[string]string{"X-Original-URI": "/files/report.pdf", "X-Original-Method": "GET", "X-User": "bob"}, 200, "rebac"},
		{"nginx-deny", "/ext_authz", map[string]string{"X-Original-URI": "/files/report.pdf", "X-Original-Method": "DELETE", "X-User": "bob"}, 403, "no_grant"},
		{"caddy-allow", "/ext_authz/", map[string]string{"X-Forwarded-Uri": "/tenants/acme/folders/q3", "X-Forwarded-Method": "PUT", "X-Forwarded-Host": "drive", "X-User": "alice"}, 200, "rbac"},
		{"envoy-http-service", "/ext_authz/files/report.pdf", map[string]string{"X-User": "bob"}, 200, "rebac"},
		{"no-subject", "/ext_authz/files/report.pdf", nil, 401, ""},
		{"invalid-utf8-header", "/ext_authz/files/report.pdf", map[string]string{"X-User": "b\xffb"}, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, ts.http+tt.path, nil)
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			status, h, body := do(t, req)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d (%s)", status, tt.wantStatus, body)
			}
			if got := h.Get("X-Nexus-Decision"); got != tt.wantHeader {
				t.Fatalf("X-Nexus-Decision = %q, want %q", got, tt.wantHeader)
			}
		})
	}
}

func TestAuthZEN(t *testing.T) {
	ts := newTestServer(t, nil)
	status, _, body := post(t, ts.http+"/access/v1/evaluation",
		`{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`)
	if status != 200 || !strings.Contains(body, `"decision":true`) {
		t.Fatalf("evaluation: %d %s", status, body)
	}
	status, _, body = post(t, ts.http+"/access/v1/evaluation",
		`{"subject":{"type":"user","id":"carol"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`)
	if status != 200 || !strings.Contains(body, `"decision":false`) {
		t.Fatalf("evaluation deny: %d %s", status, body)
	}
	status, _, body = post(t, ts.http+"/access/v1/evaluations",
		`{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file","id":"report.pdf"}},{"action":{"name":"write"},"resource":{"type":"file","id":"report.pdf"}},{"resource":{"type":"file","id":"notes.txt"}}]}`)
	var batch struct {
		Evaluations []struct {
			Decision bool `json:"decision"`
		} `json:"evaluations"`
	}
	if err := json.Unmarshal([]byte(body), &batch); err != nil || status != 200 {
		t.Fatalf("evaluations: %d %s %v", status, body, err)
	}
	if got := []bool{batch.Evaluations[0].Decision, batch.Evaluations[1].Decision, batch.Evaluations[2].Decision}; got[0] != true || got[1] != false || got[2] != true {
		t.Fatalf("evaluations = %v, want [true false true]", got)
	}
	status, _, body = post(t, ts.http+"/access/v1/evaluations",
		`{"subject":{"type":"user","id":"bob"},"action":{"name":"write"},"options":{"evaluations_semantic":"deny_on_first_deny"},"evaluations":[{"resource":{"type":"file","id":"report.pdf"}},{"resource":{"type":"file","id":"notes.txt"}}]}`)
	if status != 200 || strings.Count(body, "decision") != 1 {
		t.Fatalf("deny_on_first_deny should stop after the first deny: %s", body)
	}
}

func TestPermitAPIs(t *testing.T) {
	ts := newTestServer(t, nil)
	status, _, body := post(t, ts.http+"/allowed", `{"user":{"key":"alice"},"action":"delete","resource":{"type":"folder","key":"root","tenant":"acme"}}`)
	if status != 200 || !strings.Contains(body, `"allow":true`) || !strings.Contains(body, `"result":true`) {
		t.Fatalf("allowed: %d %s", status, body)
	}
	status, _, body = post(t, ts.http+"/allowed/bulk", `[{"user":"bob","action":"read","resource":"file:report.pdf"},{"user":"carol","action":"read","resource":"file:report.pdf"}]`)
	var bulk struct {
		Allow []struct {
			Allow bool `json:"allow"`
		} `json:"allow"`
	}
	if err := json.Unmarshal([]byte(body), &bulk); err != nil || status != 200 || len(bulk.Allow) != 2 || !bulk.Allow[0].Allow || bulk.Allow[1].Allow {
		t.Fatalf("bulk: %d %s", status, body)
	}
	status, _, body = post(t, ts.http+"/user-permissions", `{"user":{"key":"bob"}}`)
	var perms map[string]struct {
		Permissions []string `json:"permissions"`
	}
	if err := json.Unmarshal([]byte(body), &perms); err != nil || status != 200 {
		t.Fatalf("user-permissions: %d %s", status, body)
	}
	if p := perms["file:report.pdf"].Permissions; len(p) == 0 || !containsStr(p, "file:read") || containsStr(p, "file:write") {
		t.Fatalf("bob's permissions on report.pdf = %v, want read and not write (%s)", p, body)
	}
	status, _, body = post(t, ts.http+"/user-permissions", `{"user":"alice","resources":["file:report.pdf"]}`)
	if status != 200 || !strings.Contains(body, `"__tenant:acme"`) || !strings.Contains(body, `file:delete`) {
		t.Fatalf("alice's permissions: %d %s", status, body)
	}
	status, _, body = post(t, ts.http+"/authorized_users", `{"action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`)
	var au struct {
		Users map[string]any `json:"users"`
	}
	if err := json.Unmarshal([]byte(body), &au); err != nil || status != 200 {
		t.Fatalf("authorized_users: %d %s", status, body)
	}
	for _, u := range []string{"alice", "bob", "erin", "dave", "frank"} {
		if _, ok := au.Users[u]; !ok {
			t.Errorf("authorized_users lacks %s: %s", u, body)
		}
	}
	if _, ok := au.Users["carol"]; ok {
		t.Errorf("authorized_users includes carol: %s", body)
	}
}

// ended reports whether err is the hammer's own deadline.
func ended(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	c := status.Code(err)
	return c == codes.DeadlineExceeded || c == codes.Canceled
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestBadHTTPInput(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.Core.MaxBodyBytes = 1024 })
	tests := []struct {
		name, path, body string
		wantStatus       int
		wantIn           string
	}{
		{"malformed", "/allowed", `{"user":`, 400, "JSON ends early"},
		{"wrong-type", "/access/v1/evaluation", `{"subject":{"type":"user","id":1}}`, 400, "subject.id must be a string"},
		{"missing-field", "/allowed", `{"user":"bob","resource":"file:x"}`, 400, "action is required"},
		{"unknown-type", "/allowed", `{"user":"bob","action":"read","resource":"spaceship:x"}`, 400, "not a type of the schema"},
		{"invalid-utf8", "/allowed", "{\"user\":\"b\xffb\",\"action\":\"read\",\"resource\":\"file:x\"}", 400, "UTF-8"},
		{"oversized", "/allowed", `{"user":"` + strings.Repeat("a", 2000) + `"}`, 413, "too large"},
		{"oversized-forward-auth", "/ext_authz/files/x", strings.Repeat("a", 2000), 413, "too large"},
		{"forward-auth-semicolon-query", "/ext_authz/files/report.pdf?a=1;b=2", "", 400, "invalid query"},
		// A matrix parameter is part of its segment, not an error (no
		// route takes a POST there).
		{"forward-auth-matrix-param", "/ext_authz/files/report.pdf;x=1", "", 403, "no route rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := post(t, ts.http+tt.path, tt.body)
			if status != tt.wantStatus || !strings.Contains(body, tt.wantIn) {
				t.Fatalf("got %d %s, want %d containing %q", status, body, tt.wantStatus, tt.wantIn)
			}
		})
	}
}

func TestAdminWriteTurnsDenyIntoAllow(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.AdminToken = "s3cret-admin-token-16" })
	check := func() bool {
		resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "carol"}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus().GetCode() == 0
	}
	if check() {
		t.Fatal("carol allowed before the write")
	}
	// Twice, so the second deny comes from the cache.
	if check() {
		t.Fatal("carol allowed before the write (cached)")
	}
	status, _, body := post(t, ts.admin+"/v1/relationships", `{"touches":["folder:q3#viewer@user:carol"]}`)
	if status != 401 {
		t.Fatalf("write without token: %d %s", status, body)
	}
	status, _, body = post(t, ts.admin+"/v1/relationships", `{"touches":["folder:q3#viewer@user:carol","not a tuple"]}`, "Authorization", "Bearer s3cret-admin-token-16")
	if status != 400 || !strings.Contains(body, "touches[1]") {
		t.Fatalf("bad tuple: %d %s", status, body)
	}
	if check() {
		t.Fatal("a rejected batch wrote its valid half")
	}
	status, _, body = post(t, ts.admin+"/v1/relationships", `{"touches":["folder:q3#viewer@user:carol"]}`, "Authorization", "Bearer s3cret-admin-token-16")
	if status != 200 || !strings.Contains(body, "revision") {
		t.Fatalf("write: %d %s", status, body)
	}
	if !check() {
		t.Fatal("carol still denied after the write")
	}
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/relationships?object_type=folder&object_id=q3&relation=viewer", nil)
	req.Header.Set("Authorization", "Bearer s3cret-admin-token-16")
	if status, _, body := do(t, req); status != 200 || !strings.Contains(body, "folder:q3#viewer@user:carol") {
		t.Fatalf("read: %d %s", status, body)
	}
}

func TestAdminSchemaAndPolicy(t *testing.T) {
	ts := newTestServer(t, nil)
	// A schema where tenant viewers may also write files: the policy
	// follows the new grants at once.
	newSchema := strings.Replace(string(drive.Schema), "viewer: [file:read, file:view,", "viewer: [file:read, file:write, file:view,", 1)
	if newSchema == string(drive.Schema) {
		t.Fatal("the test's schema edit did not apply")
	}
	allowedErinWrite := func() bool {
		_, _, body := post(t, ts.http+"/allowed", `{"user":"erin","action":"write","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`)
		return strings.Contains(body, `"allow":true`)
	}
	if allowedErinWrite() {
		t.Fatal("erin may write before the schema change")
	}
	req, _ := http.NewRequest(http.MethodPut, ts.admin+"/v1/schema", strings.NewReader(newSchema))
	if status, _, body := do(t, req); status != 200 {
		t.Fatalf("put schema: %d %s", status, body)
	}
	if !allowedErinWrite() {
		t.Fatal("erin may not write after the schema change")
	}
	req, _ = http.NewRequest(http.MethodPut, ts.admin+"/v1/schema", strings.NewReader("types: {user: {relations: {x: [nope]}}}"))
	if status, _, body := do(t, req); status != 400 {
		t.Fatalf("bad schema: %d %s", status, body)
	}
	// A bundle without the envoy entrypoint the server evaluates is
	// refused, and the policy stays.
	if status, body := putPolicy(t, ts, "partial", map[string]string{
		"p.rego": "package nexus.authz\ndecision := {\"allow\": true, \"reason\": \"allow\"}\n",
	}, "nexus/authz/decision"); status != 400 || !strings.Contains(body, "nexus/envoy/result") {
		t.Fatalf("bundle without the envoy entrypoint: %d %s, want 400 naming it", status, body)
	}
	if _, _, body := post(t, ts.http+"/allowed", `{"user":"carol","action":"read","resource":"file:report.pdf"}`); strings.Contains(body, `"allow":true`) {
		t.Fatalf("a refused bundle replaced the policy: %s", body)
	}
	// A new bundle that allows everything swaps in atomically.
	if status, body := putPolicy(t, ts, "allow-all", map[string]string{
		"p.rego": "package nexus.authz\ndecision := {\"allow\": true, \"reason\": \"allow\"}\n",
		"e.rego": "package nexus.envoy\nresult := {\"allowed\": true}\n",
	}, "nexus/authz/decision", "nexus/envoy/result"); status != 200 || !strings.Contains(body, "allow-all") {
		t.Fatalf("put policy: %d %s", status, body)
	}
	if _, _, body := post(t, ts.http+"/allowed", `{"user":"carol","action":"read","resource":"file:report.pdf"}`); !strings.Contains(body, `"allow":true`) {
		t.Fatalf("new policy not in effect: %s", body)
	}
	req, _ = http.NewRequest(http.MethodPut, ts.admin+"/v1/policy", strings.NewReader("not a bundle"))
	if status, _, body := do(t, req); status != 400 {
		t.Fatalf("corrupt bundle: %d %s", status, body)
	}
	if _, _, body := post(t, ts.http+"/allowed", `{"user":"carol","action":"read","resource":"file:report.pdf"}`); !strings.Contains(body, `"allow":true`) {
		t.Fatalf("a corrupt bundle replaced the policy: %s", body)
	}
}

func TestMetricsHealthAndDecisionLog(t *testing.T) {
	ts := newTestServer(t, nil)
	for range 3 {
		post(t, ts.http+"/allowed", `{"user":"bob","action":"read","resource":"file:report.pdf"}`)
	}
	post(t, ts.http+"/allowed", `{"user":`) // malformed: an error, not a decision
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/metrics", nil)
	status, _, body := do(t, req)
	if status != 200 {
		t.Fatalf("metrics: %d", status)
	}
	if strings.Contains(body, `reason="bad_request",result="deny"`) {
		t.Errorf("a malformed request is counted as a deny decision")
	}
	for _, want := range []string{
		`nexus_decision_duration_seconds_bucket{cache="hit",interface="permit",le="5e-06"}`,
		`nexus_decision_duration_seconds_count{cache="miss",interface="permit"} 1`,
		`nexus_decision_duration_seconds_count{cache="hit",interface="permit"} 2`,
		`nexus_decisions_total{interface="permit",reason="rebac",result="allow"} 3`,
		`nexus_build_info{commit=`,
		`nexus_decision_errors_total{code="bad_request",interface="permit"} 1`,
		`process_cpu_seconds_total`,
		`nexus_process_peak_resident_memory_bytes`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		req, _ := http.NewRequest(http.MethodGet, ts.admin+p, nil)
		if status, _, body := do(t, req); status != 200 {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(ts.log.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(ts.log.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("decision log has %d lines, want 3", len(lines))
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &ev); err != nil {
		t.Fatal(err)
	}
	if ev["type"] != "policy.decision" || ev["subject"] != "user:bob" || ev["allowed"] != true || ev["reason"] != "rebac" || ev["cache"] != "hit" {
		t.Fatalf("event %v", ev)
	}
}

func TestCacheDisabled(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.Core.CacheDisabled = true })
	post(t, ts.http+"/allowed", `{"user":"bob","action":"read","resource":"file:report.pdf"}`)
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/metrics", nil)
	_, _, body := do(t, req)
	if !strings.Contains(body, `nexus_decision_duration_seconds_count{cache="disabled",interface="permit"} 1`) {
		t.Fatal("a check with the cache disabled was not counted as disabled")
	}
}

// TestHammer checks while relationships are written and the policy is
// reloaded; run with -race. Every answer must be the right one for the
// state it saw: bob may always read report.pdf; carol's access flips.
// TestHammer runs checks from several goroutines while a writer flips
// carol's access and reloads the policy. Checks whose answer does not
// depend on the writes must never change (bob always allowed, mallory always
// denied with no_grant); carol's concurrent checks may go either way but
// never fail; and the writer, after each acknowledged write, must see its
// own write (allowed after the touch, denied after the delete): a stale
// cache entry would show there.
func TestHammer(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	check := func(user string) (*authv3.CheckResponse, error) {
		return ts.grpc.Check(ctx, fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": user}))
	}
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				for _, c := range []struct {
					user string
					want codes.Code
					any  bool // allowed or denied, as the writer flips it
				}{{"bob", codes.OK, false}, {"mallory", codes.PermissionDenied, false}, {"carol", 0, true}} {
					resp, err := check(c.user)
					if ended(ctx, err) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
					got := codes.Code(resp.GetStatus().GetCode())
					switch {
					case c.any && got != codes.OK && got != codes.PermissionDenied:
						errs <- fmt.Errorf("carol's check failed during the hammer: %v", resp)
						return
					case !c.any && got != c.want:
						errs <- fmt.Errorf("%s: status %v during the hammer, want %v: %v", c.user, got, c.want, resp)
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			op, want := "touches", codes.OK
			if i%2 == 1 {
				op, want = "deletes", codes.PermissionDenied
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.admin+"/v1/relationships", strings.NewReader(`{"`+op+`":["folder:q3#viewer@user:carol"]}`))
			if err != nil {
				errs <- err
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body) // so the connection is reused
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("write %d (%s): status %d", i, op, resp.StatusCode)
				return
			}
			got, err := check("carol")
			if ended(ctx, err) {
				return
			}
			if err != nil || codes.Code(got.GetStatus().GetCode()) != want {
				errs <- fmt.Errorf("after write %d (%s) carol's check = %v, %v; want %v", i, op, got.GetStatus(), err, want)
				return
			}
			if i%10 == 0 {
				if err := ts.pdp.Load(ctx, nil); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("hammer: %v", err)
	}
}

// BenchmarkExtAuthzCheck measures one Envoy-shaped Check over loopback
// gRPC, end to end (client marshal, transport, input, cache, policy,
// builtins, response), with the decision cache disabled so every check
// evaluates the policy.
func BenchmarkExtAuthzCheck(b *testing.B) {
	ts := newTestServer(b, func(c *testConfig) { c.Core.CacheDisabled = true; c.Core.DecisionLog = nil })
	for _, bc := range []struct {
		name string
		req  *authv3.CheckRequest
	}{
		{"RBAC", fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})},
		{"ReBACDepth3", fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})},
		{"Deny", fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "carol"})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := ts.grpc.Check(ctx, bc.req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkAllowedHTTP measures one Permit /allowed check over loopback
// HTTP, with the cache disabled.
func BenchmarkAllowedHTTP(b *testing.B) {
	ts := newTestServer(b, func(c *testConfig) { c.Core.CacheDisabled = true; c.Core.DecisionLog = nil })
	body := `{"user":"bob","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, ts.http+"/allowed", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAppKey)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

func TestEdgeSnapshot(t *testing.T) {
	ts := newTestServer(t, nil)
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/edge/snapshot", nil)
	status, h, body := do(t, req)
	if status != 200 {
		t.Fatalf("snapshot: %d %s", status, body)
	}
	var snap api.EdgeSnapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if err := snap.Validate(); err != nil {
		t.Fatalf("served snapshot is invalid: %v", err)
	}
	if got := snap.Assignments["alice"]["acme"]; len(got) != 1 || got[0] != "admin" {
		t.Fatalf("alice's roles = %v", got)
	}
	// The drive's files and folders have a stored tenant: the edge reads
	// a request's tenant from the request, so it must leave them (and
	// their grants) to the PDP.
	if _, ok := snap.ResourceTypes["file"]; ok || containsStr(snap.Roles["admin"], "file:*") {
		t.Fatalf("a type with a stored tenant is in the edge snapshot: types %v roles %v", snap.ResourceTypes, snap.Roles)
	}
	etag := h.Get("ETag")
	req, _ = http.NewRequest(http.MethodGet, ts.admin+"/v1/edge/snapshot", nil)
	req.Header.Set("If-None-Match", etag)
	if status, _, _ := do(t, req); status != http.StatusNotModified {
		t.Fatalf("unchanged snapshot: %d, want 304", status)
	}
	post(t, ts.admin+"/v1/relationships", `{"touches":["tenant:acme#viewer@user:carol"]}`)
	if status, h2, body := do(t, req); status != 200 || h2.Get("ETag") == etag || !strings.Contains(body, `"carol"`) {
		t.Fatalf("after a write: %d etag %q body %s", status, h2.Get("ETag"), body)
	}
}

// BenchmarkCheckServerSide is the server's own cost of one ext_authz
// check (input document, policy evaluation with its builtins, response),
// without the gRPC transport: what nexus adds to an allow-only server.
func BenchmarkCheckServerSide(b *testing.B) {
	for _, cache := range []bool{false, true} {
		ts := newTestServer(b, func(c *testConfig) { c.Core.CacheDisabled = !cache; c.Core.DecisionLog = nil })
		for _, bc := range []struct {
			name string
			req  *authv3.CheckRequest
		}{
			{"RBAC", fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})},
			{"ReBACDepth3", fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})},
		} {
			name := bc.name + "/cache=off"
			if cache {
				name = bc.name + "/cache=on"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				cpu0 := fixture.ProcessCPU()
				for b.Loop() {
					resp, err := ts.srv.CheckDirect(ctx, bc.req)
					if err != nil || resp.GetStatus().GetCode() != 0 {
						b.Fatal(err, resp)
					}
				}
				b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestAdminProfiling: /debug/pprof/ is served only when enabled, and only
// with the admin token.
func TestAdminProfiling(t *testing.T) {
	get := func(url, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		status, _, _ := do(t, req)
		return status
	}
	off := newTestServer(t, func(c *testConfig) { c.AdminToken = "s3cret-admin-token-16" })
	if status := get(off.admin+"/debug/pprof/", "s3cret-admin-token-16"); status != http.StatusNotFound {
		t.Fatalf("pprof when disabled: %d, want 404", status)
	}
	on := newTestServer(t, func(c *testConfig) { c.AdminToken = "s3cret-admin-token-16"; c.Profiling = true })
	if status := get(on.admin+"/debug/pprof/", ""); status != http.StatusUnauthorized {
		t.Fatalf("pprof without token: %d, want 401", status)
	}
	if status := get(on.admin+"/debug/pprof/goroutine?debug=1", "s3cret-admin-token-16"); status != http.StatusOK {
		t.Fatalf("pprof with token: %d, want 200", status)
	}
}

// TestGRPCBodyTooLarge: a body over MaxBodyBytes is denied with too_large
// whether or not the policy reads it.
func TestGRPCBodyTooLarge(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.Core.MaxBodyBytes = 1024 })
	req := fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})
	req.Attributes.Request.Http.Body = strings.Repeat("x", 2048)
	// As grpc-go answers a message over its size limit.
	resp, err := ts.grpc.Check(context.Background(), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Check = %v, %v; want a RESOURCE_EXHAUSTED error", resp, err)
	}
}

// TestAdminReadParams: the relationships listing names what is wrong with
// its query (400), never answers 500 or ignores a parameter.
func TestAdminReadParams(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name, query string
		want        int
		wantIn      string
	}{
		{"subject-id-alone", "subject_id=x", 400, "subject_id needs subject_type"},
		{"object-id-alone", "object_id=report.pdf", 400, "object_id needs object_type"},
		{"unknown", "object=file:report.pdf", 400, `unknown query parameter \"object\"`},
		{"twice", "object_type=file&object_type=folder", 400, "given 2 times"},
		{"bad-limit", "object_type=file&limit=0", 400, "limit"},
		{"ok", "object_type=file&object_id=report.pdf", 200, "file:report.pdf#parent@folder:q3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/relationships?"+tt.query, nil)
			status, _, body := do(t, req)
			if status != tt.want || !strings.Contains(body, tt.wantIn) {
				t.Fatalf("got %d %s, want %d containing %q", status, body, tt.want, tt.wantIn)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodPut, ts.admin+"/v1/schema?force=yes", strings.NewReader("types: {user: {}}"))
	if status, _, body := do(t, req); status != 400 || !strings.Contains(body, "force") {
		t.Fatalf("force=yes: %d %s, want 400 naming force", status, body)
	}
}

// TestPolicyResultShapeHidden: a policy whose result is not a decision
// denies with a stable reason; the client never sees Go's description of
// the mismatch, which goes to the log.
func TestPolicyResultShapeHidden(t *testing.T) {
	logs := &fixture.SyncBuffer{}
	ts := newTestServer(t, func(c *testConfig) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if status, body := putPolicy(t, ts, "bad-shape", map[string]string{
		"p.rego": "package nexus.authz\ndecision := {\"allow\": \"yes\"}\n",
		"e.rego": "package nexus.envoy\nresult := {\"allowed\": false, \"http_status\": \"teapot\"}\n",
	}, "nexus/authz/decision", "nexus/envoy/result"); status != 200 {
		t.Fatalf("put policy: %d %s", status, body)
	}
	leaks := []string{"json:", "Go value", "unmarshal", "*bool", "json.Number"}
	code, _, body := post(t, ts.http+"/allowed", `{"user":"bob","action":"read","resource":"file:report.pdf"}`)
	if code != 500 || !strings.Contains(body, pdp.CodePolicyResult) {
		t.Fatalf("/allowed: %d %s, want 500 with reason %s", code, body, pdp.CodePolicyResult)
	}
	// As opa-envoy-plugin answers a result that is not a decision: a gRPC
	// error, which Envoy answers by its failure_mode_allow (false: denied).
	resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"}))
	if status.Code(err) != codes.Unknown {
		t.Fatalf("Check = %v, %v; want an UNKNOWN error", resp, err)
	}
	for _, leak := range append(leaks, "teapot") {
		for _, s := range []string{body, status.Convert(err).Message()} {
			if strings.Contains(s, leak) {
				t.Fatalf("the client sees %q: %s", leak, s)
			}
		}
	}
	if !strings.Contains(logs.String(), "invalid_policy_result") || !strings.Contains(logs.String(), "allow") {
		t.Fatalf("the log lacks the detail: %s", logs.String())
	}
}

// TestDecisionIDs: every gRPC decision carries a decision_id in its
// dynamic metadata, as opa-envoy-plugin's do, in a UUID's shape, unique,
// and the same ID names the decision in the decision log.
func TestDecisionIDs(t *testing.T) {
	ts := newTestServer(t, nil)
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for _, user := range []string{"bob", "carol", "bob"} {
		resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": user}))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.GetDynamicMetadata().GetFields()["decision_id"].GetStringValue()
		if !uuid.MatchString(id) || seen[id] {
			t.Fatalf("decision_id %q: want a new UUID-shaped ID (seen %v)", id, seen)
		}
		seen[id] = true
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(ts.log.String(), "\n") < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, line := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		var ev struct {
			ID string `json:"decision_id"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if !seen[ev.ID] {
			t.Fatalf("the decision log's %q is not an ID Envoy got (%v)", ev.ID, seen)
		}
		delete(seen, ev.ID)
	}
	if len(seen) != 0 {
		t.Fatalf("decisions missing from the log: %v", seen)
	}
}

// TestCrossTenantRBAC: a tenant admin of acme may not act on a file the
// store assigns to globex by naming acme, on any interface: the store's
// tenant wins and the claim is denied as tenant_mismatch. Without a claim
// the store's tenant is used.
func TestCrossTenantRBAC(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx := context.Background()
	var touches []api.Tuple
	for _, s := range []string{"file:ledger#tenant@tenant:globex", "tenant:globex#admin@user:gina"} {
		tu, err := api.ParseTuple(s)
		if err != nil {
			t.Fatal(err)
		}
		touches = append(touches, tu)
	}
	if _, err := ts.store.Write(ctx, datastore.WriteRequest{Touches: touches}); err != nil {
		t.Fatal(err)
	}
	grpcCheck := func(method, path string, hdr map[string]string) (bool, string) {
		resp, err := ts.grpc.Check(ctx, fixture.EnvoyRequest(method, path, hdr))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus().GetCode() == 0, headerValue(resp.GetDeniedResponse().GetHeaders(), "x-nexus-decision")
	}
	tests := []struct {
		name       string
		allowed    func() (bool, string)
		want       bool
		wantReason string
	}{
		{"grpc-path-claims-acme", func() (bool, string) {
			return grpcCheck("DELETE", "/tenants/acme/files/ledger", map[string]string{"x-user": "alice"})
		}, false, "tenant_mismatch"},
		{"grpc-header-claims-acme", func() (bool, string) {
			return grpcCheck("DELETE", "/files/ledger", map[string]string{"x-user": "alice", "x-tenant": "acme"})
		}, false, "tenant_mismatch"},
		{"grpc-no-claim-store-tenant", func() (bool, string) {
			return grpcCheck("DELETE", "/files/ledger", map[string]string{"x-user": "alice"})
		}, false, "no_grant"},
		{"grpc-globex-admin", func() (bool, string) {
			return grpcCheck("DELETE", "/files/ledger", map[string]string{"x-user": "gina"})
		}, true, ""},
		{"permit-claims-acme", func() (bool, string) {
			_, _, body := post(t, ts.http+"/allowed", `{"user":"alice","action":"delete","resource":{"type":"file","key":"ledger","tenant":"acme"}}`)
			return strings.Contains(body, `"allow":true`), map[bool]string{true: "tenant_mismatch"}[strings.Contains(body, "tenant_mismatch")]
		}, false, "tenant_mismatch"},
		{"authzen-claims-acme", func() (bool, string) {
			_, _, body := post(t, ts.http+"/access/v1/evaluation", `{"subject":{"type":"user","id":"alice"},"action":{"name":"delete"},"resource":{"type":"file","id":"ledger","properties":{"tenant":"acme"}}}`)
			return strings.Contains(body, `"decision":true`), map[bool]string{true: "tenant_mismatch"}[strings.Contains(body, "tenant_mismatch")]
		}, false, "tenant_mismatch"},
		{"permit-globex-admin-no-claim", func() (bool, string) {
			_, _, body := post(t, ts.http+"/allowed", `{"user":"gina","action":"delete","resource":"file:ledger"}`)
			return strings.Contains(body, `"allow":true`), ""
		}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := tt.allowed()
			if got != tt.want || (tt.wantReason != "" && reason != tt.wantReason) {
				t.Fatalf("allowed = %v (reason %q), want %v (reason %q)", got, reason, tt.want, tt.wantReason)
			}
		})
	}
}

// TestMalformedIdentityIsClientError: a subject, tenant or resource ID the
// store cannot hold is the client's error (400 invalid_request, or 401
// without a subject), never a 500 with internal text.
func TestMalformedIdentityIsClientError(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name       string
		path       string
		hdr        map[string]string
		wantStatus int32
		wantReason string
	}{
		{"space", "/files/report.pdf", map[string]string{"x-user": "bob smith"}, 400, "subject is not a valid ID"},
		{"comma-sent-twice", "/files/report.pdf", map[string]string{"x-user": "bob,alice"}, 400, "subject is not a valid ID"},
		{"empty", "/files/report.pdf", map[string]string{"x-user": ""}, 400, "subject is not a valid ID"},
		{"hash", "/files/report.pdf", map[string]string{"x-user": "bob#member"}, 400, "subject is not a valid ID"},
		{"too-long", "/files/report.pdf", map[string]string{"x-user": strings.Repeat("a", 300)}, 400, "subject is not a valid ID"},
		{"bad-tenant-header", "/files/report.pdf", map[string]string{"x-user": "bob", "x-tenant": "ac me"}, 400, "tenant is not a valid ID"},
		{"bad-tenant-segment", "/tenants/a%20b/files/report.pdf", map[string]string{"x-user": "alice"}, 400, "tenant is not a valid ID"},
		{"bad-resource-segment", "/files/a%20b", map[string]string{"x-user": "alice"}, 400, "resource is not a valid ID"},
		{"resource-with-colon", "/files/a:b", map[string]string{"x-user": "alice"}, 400, "resource is not a valid ID"},
		{"dot-dot", "/files/%2e%2e", map[string]string{"x-user": "alice"}, 400, "resource is not a valid ID"},
		{"no-subject", "/files/report.pdf", nil, 401, "no subject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", tt.path, tt.hdr))
			if err != nil {
				t.Fatal(err)
			}
			den := resp.GetDeniedResponse()
			if resp.GetStatus().GetCode() == 0 || int32(den.GetStatus().GetCode()) != tt.wantStatus || !strings.Contains(den.GetBody(), tt.wantReason) {
				t.Fatalf("got %v, want a %d denial (%s)", resp, tt.wantStatus, tt.wantReason)
			}
			for _, leak := range []string{"builtin", "engine", "nexus.roles", "nexus.check"} {
				if strings.Contains(den.GetBody(), leak) || strings.Contains(resp.GetStatus().GetMessage(), leak) {
					t.Fatalf("internal text %q reaches the client: %v", leak, resp)
				}
			}
		})
	}
}

// TestApplicationIDsAreChecked: an application check naming an ID the
// store cannot hold is a 400 naming the field, not a 500 from the store.
func TestApplicationIDsAreChecked(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, body := range []string{
		`{"user":"bo%b","action":"read","resource":"file:report.pdf"}`,
		`{"user":"bob","action":"read","resource":{"type":"file","key":"re:port","tenant":"acme"}}`,
		`{"user":"bob","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"ac!me"}}`,
	} {
		status, _, resp := post(t, ts.http+"/allowed", body)
		if status != 400 || !strings.Contains(resp, "is not a valid ID") {
			t.Errorf("%s: %d %s, want 400 naming the invalid ID", body, status, resp)
		}
	}
}

// TestDecisionLogSubject: the decision log names the subject of proxied
// decisions (gRPC and forward auth), as it does for application checks.
func TestDecisionLogSubject(t *testing.T) {
	ts := newTestServer(t, nil)
	if _, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, ts.http+"/ext_authz/files/report.pdf", nil)
	req.Header.Set("x-user", "carol")
	do(t, req)
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(ts.log.String(), "\n") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		var ev struct {
			Interface string `json:"interface"`
			Subject   string `json:"subject"`
			Allowed   bool   `json:"allowed"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		got[ev.Interface] = ev.Subject
	}
	if got[pdp.IfaceGRPC] != "bob" || got[pdp.IfaceHTTP] != "carol" {
		t.Fatalf("decision log subjects %v, want grpc bob and http carol", got)
	}
}

// TestForwardAuthForgedForwardingHeaders: a proxy sets one family of
// forwarding headers and passes the other as the client sent it; when the
// two name different requests nexus refuses to choose.
func TestForwardAuthForgedForwardingHeaders(t *testing.T) {
	ts := newTestServer(t, nil)
	get := func(path string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.http+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		status, _, body := do(t, req)
		return status, body
	}
	// nginx asks about DELETE of a file; the client added a Caddy-style
	// pair naming a harmless read.
	if status, body := get("/ext_authz", map[string]string{
		"X-Original-Method": "DELETE", "X-Original-URI": "/files/report.pdf", "x-user": "bob",
		"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/files/report.pdf",
	}); status != 400 || !strings.Contains(body, "named twice") {
		t.Fatalf("forged X-Forwarded pair: %d %s, want 400", status, body)
	}
	// Envoy's http_service appends the path; a client's X-Forwarded-Uri
	// naming another one is refused too.
	if status, body := get("/ext_authz/files/report.pdf", map[string]string{"X-Forwarded-Uri": "/files/other", "x-user": "bob"}); status != 400 {
		t.Fatalf("path and X-Forwarded-Uri disagree: %d %s, want 400", status, body)
	}
	// One source, or two that agree, decide as usual.
	if status, body := get("/ext_authz", map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/files/report.pdf", "x-user": "bob"}); status != 200 {
		t.Fatalf("nginx-style request: %d %s, want 200", status, body)
	}
	if status, body := get("/ext_authz", map[string]string{
		"X-Original-Method": "GET", "X-Original-URI": "/files/report.pdf",
		"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/files/report.pdf", "x-user": "bob",
	}); status != 200 {
		t.Fatalf("agreeing sources: %d %s, want 200", status, body)
	}
}

// TestForwardAuthMethodOverride: in Envoy's http_service shape (the path
// appended, the check sent with the request's own method) a client's
// method and URI headers never replace the request's method: headers that
// disagree are refused (400), and no mutation of them turns bob's DELETE,
// which the policy denies, into an allow.
func TestForwardAuthMethodOverride(t *testing.T) {
	ts := newTestServer(t, nil)
	check := func(method, path string, hdr [][2]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.http+path, nil)
		req.Header.Set("x-user", "bob")
		for _, kv := range hdr {
			req.Header.Add(kv[0], kv[1])
		}
		status, _, body := do(t, req)
		return status, body
	}
	if status, body := check(http.MethodDelete, "/ext_authz/files/report.pdf", nil); status != 403 {
		t.Fatalf("bob's DELETE without headers: %d %s, want 403", status, body)
	}
	families := [][2]string{{"X-Original-Method", "X-Original-URI"}, {"X-Forwarded-Method", "X-Forwarded-Uri"}}
	methods := []string{"GET", "get", "HEAD", "DELETE", "", "GET, DELETE", " GET"}
	uris := []string{"/files/report.pdf", "", "/files/report.pdf?x=1", "/files/other", "//files/report.pdf", "/files/report.pdf/"}
	wrong, refused := 0, 0
	for _, fam := range families {
		for _, m := range methods {
			for _, u := range uris {
				var hdr [][2]string
				if m != "" {
					hdr = append(hdr, [2]string{fam[0], m})
				}
				if u != "" {
					hdr = append(hdr, [2]string{fam[1], u})
				}
				status, body := check(http.MethodDelete, "/ext_authz/files/report.pdf", hdr)
				if status == 200 {
					wrong++
					t.Errorf("DELETE with %v: allowed (%s)", hdr, body)
				}
				if status == 400 {
					refused++
				}
			}
		}
	}
	t.Logf("%d wrong allows, %d refused (400)", wrong, refused)
	// The http_service request with a disagreeing method header is a 400.
	if status, body := check(http.MethodDelete, "/ext_authz/files/report.pdf", [][2]string{{"X-Original-Method", "GET"}, {"X-Original-URI", "/files/report.pdf"}}); status != 400 || !strings.Contains(body, "named twice") {
		t.Fatalf("DELETE named GET by X-Original-Method: %d %s, want 400", status, body)
	}
	// Headers that agree with the request change nothing.
	if status, body := check(http.MethodDelete, "/ext_authz/files/report.pdf", [][2]string{{"X-Forwarded-Method", "DELETE"}, {"X-Forwarded-Uri", "/files/report.pdf"}}); status != 403 {
		t.Fatalf("agreeing headers: %d %s, want 403", status, body)
	}
	// nginx and HAProxy: a GET subrequest with the path appended and the
	// method in X-Original-Method still decides on that method.
	if status, body := check(http.MethodGet, "/ext_authz/files/report.pdf", [][2]string{{"X-Original-Method", "DELETE"}, {"X-Original-URI", "/files/report.pdf"}}); status != 403 {
		t.Fatalf("nginx-style DELETE: %d %s, want 403", status, body)
	}
	if status, body := check(http.MethodGet, "/ext_authz/files/report.pdf", [][2]string{{"X-Original-Method", "GET"}, {"X-Original-URI", "/files/report.pdf"}}); status != 200 {
		t.Fatalf("nginx-style GET: %d %s, want 200", status, body)
	}
}

// TestDecisionLogSubjectEarlyDenials: the denials decided before the
// store is asked (no route rule, an invalid tenant or resource ID) name
// the subject in the decision log when the request named a valid one, on
// both transports; a request without a subject logs none.
func TestDecisionLogSubjectEarlyDenials(t *testing.T) {
	ts := newTestServer(t, nil)
	type event struct {
		Interface string `json:"interface"`
		Subject   string `json:"subject"`
		Reason    string `json:"reason"`
		Allowed   bool   `json:"allowed"`
	}
	cases := []struct {
		method, path, user string
		want               event
	}{
		{"GET", "/no/such/route", "bob", event{Subject: "bob", Reason: "no_route"}},
		{"POST", "/files/report.pdf/nothing", "carol", event{Subject: "carol", Reason: "no_route"}},
		{"GET", "/tenants/ac!me/folders/q3", "alice", event{Subject: "alice", Reason: "invalid_request"}},
		{"GET", "/files/re%20port", "dave", event{Subject: "dave", Reason: "invalid_request"}},
		{"GET", "/no/such/route", "", event{Reason: "no_route"}},
		{"GET", "/no/such/route", "b b", event{Reason: "no_route"}},
	}
	for _, iface := range []string{pdp.IfaceGRPC, pdp.IfaceHTTP} {
		for _, c := range cases {
			t.Run(iface+c.method+c.path+c.user, func(t *testing.T) {
				before := len(ts.log.String())
				hdr := map[string]string{}
				if c.user != "" {
					hdr["x-user"] = c.user
				}
				if iface == pdp.IfaceGRPC {
					if _, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest(c.method, c.path, hdr)); err != nil {
						t.Fatal(err)
					}
				} else {
					req, _ := http.NewRequest(c.method, ts.http+"/ext_authz"+c.path, nil)
					for k, v := range hdr {
						req.Header.Set(k, v)
					}
					do(t, req)
				}
				deadline := time.Now().Add(5 * time.Second)
				for !strings.Contains(ts.log.String()[before:], "\n") && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				var ev event
				if err := json.Unmarshal([]byte(strings.TrimSpace(ts.log.String()[before:])), &ev); err != nil {
					t.Fatalf("decision log %q: %v", ts.log.String(), err)
				}
				want := c.want
				want.Interface = iface
				if ev != want {
					t.Fatalf("logged %+v, want %+v", ev, want)
				}
			})
		}
	}
}
