package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
	"github.com/nexuspdp/nexus/e2e/internal/proxy"
)

const adminToken = "e2e-admin-token-0123456789"

// liveNexus starts the real binary on free loopback ports with the
// embedded default (the drive demo), an admin token and the extra serve
// flags given.
type liveNexus struct {
	grpc, http, admin string
}

func startLiveNexus(t *testing.T, flags ...string) liveNexus {
	t.Helper()
	n := liveNexus{grpc: nexusproc.FreeAddr(t), http: nexusproc.FreeAddr(t), admin: nexusproc.FreeAddr(t)}
	args := append([]string{"serve",
		"--grpc-addr", n.grpc, "--http-addr", n.http, "--admin-addr", n.admin,
		"--admin-token", adminToken, "--data-dir", "data"}, flags...)
	nexusproc.Start(t, "", n.admin, args...)
	return n
}

// write adds relationships through the admin API.
func (n liveNexus) write(t *testing.T, tuples ...string) {
	t.Helper()
	body, _ := json.Marshal(map[string][]string{"touches": tuples})
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.admin+"/v1/relationships", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("write %v: %d %s", tuples, resp.StatusCode, b)
	}
}

// upstream records the nexus headers each request brought, and the
// user the proxy verified.
func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"path":     r.URL.Path,
			"subject":  r.Header.Get("X-Nexus-Subject"),
			"decision": r.Header.Get("X-Nexus-Decision"),
			"user":     r.Header.Get("X-User"),
		})
	}))
	t.Cleanup(s.Close)
	return s
}

// TestProxiesInFrontOfNexus drives nginx (auth_request), Caddy
// (forward_auth) and HAProxy (a Lua check), each in front of the real nexus
// binary: RBAC allow, ReBAC allow through a folder three levels up, deny, a
// relationship written through the admin API turning a deny into an allow,
// and the policy's headers reaching the upstream. Each proxy authenticates
// the user (basic authentication) and is the trusted hop that sets x-user
// (nexus serve --trusted-subject-header x-user): a client's own x-user
// never decides.
func TestProxiesInFrontOfNexus(t *testing.T) {
	n := startLiveNexus(t, "--trusted-subject-header", "x-user")
	up := upstream(t)
	for _, kind := range proxy.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			if _, err := proxy.Binary(kind); err != nil {
				t.Fatalf("%s is not installed (make deps installs it): %v", kind, err)
			}
			guest := "guest-" + string(kind)
			p := proxy.Start(t, proxy.Config{
				Kind: kind, Nexus: n.http, Upstream: strings.TrimPrefix(up.URL, "http://"),
				UpstreamHeaders: []string{"X-Nexus-Subject", "X-Nexus-Decision"},
				Users:           []string{"alice", "bob", "carol", guest},
			})
			// do sends GET path as user (basic authentication; "" sends no
			// credentials) with a client-set X-User of forged ("" none).
			do := func(path, user, forged string) (int, map[string]string) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
				if user != "" {
					req.SetBasicAuth(user, proxy.Password)
				}
				if forged != "" {
					req.Header.Set("X-User", forged)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var seen map[string]string
				if resp.StatusCode == 200 {
					if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil {
						t.Fatalf("upstream answer: %v", err)
					}
				}
				return resp.StatusCode, seen
			}
			get := func(path, user string) (int, map[string]string) {
				t.Helper()
				return do(path, user, "")
			}
			status, seen := get("/tenants/acme/files/report.pdf", "alice")
			if status != 200 || seen["decision"] != "rbac" || seen["subject"] != "alice" {
				t.Fatalf("RBAC allow: %d %v\n%s", status, seen, p.Output())
			}
			status, seen = get("/files/report.pdf", "bob")
			if status != 200 || seen["decision"] != "rebac" || seen["subject"] != "bob" {
				t.Fatalf("ReBAC allow (folder three levels up): %d %v", status, seen)
			}
			user := guest
			if status, _ := get("/files/report.pdf", user); status != 403 {
				t.Fatalf("deny: %d, want 403", status)
			}
			n.write(t, "folder:projects#viewer@user:"+user)
			status, seen = get("/files/report.pdf", user)
			if status != 200 || seen["subject"] != user || seen["decision"] != "rebac" {
				t.Fatalf("after the write: %d %v, want an allow", status, seen)
			}
			// A client's own X-User names nobody: without credentials the
			// proxy answers 401; with carol's, carol is the subject (alice,
			// a tenant admin, could read the file), and the upstream sees
			// carol too.
			if status, _ := do("/tenants/acme/files/report.pdf", "", "alice"); status != 401 {
				t.Fatalf("forged X-User without credentials: %d, want 401", status)
			}
			if status, _ := do("/tenants/acme/files/report.pdf", "carol", "alice"); status != 403 {
				t.Fatalf("carol with a forged X-User: alice: %d, want 403", status)
			}
			if status, seen := do("/files/report.pdf", "bob", "alice"); status != 200 || seen["subject"] != "bob" || seen["user"] != "bob" {
				t.Fatalf("bob with a forged X-User: alice: %d %v, want an allow for bob", status, seen)
			}
			// A client cannot forge the policy's headers for the upstream.
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/files/report.pdf", nil)
			req.SetBasicAuth("bob", proxy.Password)
			req.Header.Set("X-Nexus-Subject", "alice")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var forged map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&forged)
			resp.Body.Close()
			if forged["subject"] != "bob" {
				t.Fatalf("upstream saw subject %q, want the policy's bob", forged["subject"])
			}
		})
	}
}

// envoyCheck is a CheckRequest as Envoy in an Istio sidecar sends it. A
// non-empty jwtSub adds what Envoy's jwt_authn filter (payload_in_metadata:
// jwt_payload) and ext_authz (metadata_context_namespaces:
// envoy.filters.http.jwt_authn) add for a token it verified; a non-empty
// user sets the x-user header.
func envoyCheck(t testing.TB, method, path, user, jwtSub string) *authv3.CheckRequest {
	t.Helper()
	sock := func(ip string, port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	headers := map[string]string{
		":authority": "drive.default.svc.cluster.local:8080", ":method": method, ":path": path, ":scheme": "http",
		"x-forwarded-proto":       "http",
		"x-request-id":            "0d6f6c5e-1d5b-4b0e-8f7a-6b3c2f1e0a9d",
		"x-forwarded-client-cert": "By=spiffe://cluster.local/ns/default/sa/drive;Hash=4b1c;Subject=\"\";URI=spiffe://cluster.local/ns/default/sa/web",
		"x-envoy-attempt-count":   "1",
		"user-agent":              "Go-http-client/1.1",
	}
	if user != "" {
		headers["x-user"] = user
	}
	a := &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sock("10.244.0.12", 45678), Principal: "spiffe://cluster.local/ns/default/sa/web"},
		Destination: &authv3.AttributeContext_Peer{Address: sock("10.244.0.19", 8080), Principal: "spiffe://cluster.local/ns/default/sa/drive"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "8421379", Method: method, Path: path, Host: "drive.default.svc.cluster.local:8080",
			Scheme: "http", Protocol: "HTTP/1.1", Headers: headers,
		}},
		ContextExtensions: map[string]string{"virtual_host": "inbound|http|8080"},
	}
	if jwtSub != "" {
		payload, err := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{
			"iss": "https://nexus.example/demo", "aud": "nexus-demo", "sub": jwtSub, "iat": 1796083200, "exp": 4102444800,
		}})
		if err != nil {
			t.Fatal(err)
		}
		a.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": payload}}
	}
	return &authv3.CheckRequest{Attributes: a}
}

// TestEnvoyShapedGRPC sends CheckRequests shaped as Envoy and Istio send
// them to the real binary over gRPC: started as shipped (no trusted
// header), where only a verified JWT names the subject and a client's
// x-user is ignored, and with --trusted-subject-header x-user, where a JWT
// still wins over the header.
func TestEnvoyShapedGRPC(t *testing.T) {
	clients := map[bool]authv3.AuthorizationClient{}
	for _, trusted := range []bool{false, true} {
		var flags []string
		if trusted {
			flags = []string{"--trusted-subject-header", "x-user"}
		}
		n := startLiveNexus(t, flags...)
		conn, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		clients[trusted] = authv3.NewAuthorizationClient(conn)
	}
	tests := []struct {
		name         string
		trusted      bool
		method, path string
		user, jwtSub string
		wantCode     codes.Code
		wantHTTP     int32
		wantSubject  string
	}{
		{name: "jwt rbac", method: "DELETE", path: "/tenants/acme/folders/q3", jwtSub: "alice", wantCode: codes.OK, wantSubject: "alice"},
		{name: "jwt rebac-depth-3", method: "GET", path: "/files/report.pdf", jwtSub: "bob", wantCode: codes.OK, wantSubject: "bob"},
		{name: "jwt deny", method: "PUT", path: "/files/report.pdf", jwtSub: "bob", wantCode: codes.PermissionDenied, wantHTTP: 403},
		{name: "no subject", method: "GET", path: "/files/report.pdf", wantCode: codes.PermissionDenied, wantHTTP: 401},
		{name: "forged x-user", method: "DELETE", path: "/tenants/acme/folders/q3", user: "alice", wantCode: codes.PermissionDenied, wantHTTP: 401},
		{name: "jwt beats a forged x-user", method: "DELETE", path: "/tenants/acme/folders/q3", user: "alice", jwtSub: "carol", wantCode: codes.PermissionDenied, wantHTTP: 403},
		{name: "trusted x-user rbac", trusted: true, method: "DELETE", path: "/tenants/acme/folders/q3", user: "alice", wantCode: codes.OK, wantSubject: "alice"},
		{name: "trusted x-user deny", trusted: true, method: "PUT", path: "/files/report.pdf", user: "bob", wantCode: codes.PermissionDenied, wantHTTP: 403},
		{name: "jwt beats a trusted x-user", trusted: true, method: "GET", path: "/files/report.pdf", user: "carol", jwtSub: "bob", wantCode: codes.OK, wantSubject: "bob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := clients[tt.trusted].Check(ctx, envoyCheck(t, tt.method, tt.path, tt.user, tt.jwtSub))
			if err != nil {
				t.Fatal(err)
			}
			if got := codes.Code(resp.GetStatus().GetCode()); got != tt.wantCode {
				t.Fatalf("status %v, want %v (%v)", got, tt.wantCode, resp)
			}
			if tt.wantHTTP != 0 && int32(resp.GetDeniedResponse().GetStatus().GetCode()) != tt.wantHTTP {
				t.Fatalf("denied HTTP status %d, want %d", resp.GetDeniedResponse().GetStatus().GetCode(), tt.wantHTTP)
			}
			if tt.wantHTTP == 401 {
				found := false
				for _, h := range resp.GetDeniedResponse().GetHeaders() {
					found = found || (strings.EqualFold(h.GetHeader().GetKey(), "www-authenticate") && strings.HasPrefix(h.GetHeader().GetValue(), "Bearer"))
				}
				if !found {
					t.Fatalf("401 without WWW-Authenticate: Bearer: %v", resp.GetDeniedResponse().GetHeaders())
				}
			}
			if tt.wantSubject != "" {
				got := ""
				for _, h := range resp.GetOkResponse().GetHeaders() {
					if h.GetHeader().GetKey() == "x-nexus-subject" {
						got = h.GetHeader().GetValue()
					}
				}
				if got != tt.wantSubject {
					t.Fatalf("x-nexus-subject %q, want %q", got, tt.wantSubject)
				}
			}
		})
	}
}
