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

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
	"github.com/nexuspdp/nexus/e2e/internal/proxy"
)

const adminToken = "e2e-token"

// liveNexus starts the real binary on free loopback ports with the
// embedded default (the drive demo) and an admin token.
type liveNexus struct {
	grpc, http, admin string
}

func startLiveNexus(t *testing.T) liveNexus {
	t.Helper()
	n := liveNexus{grpc: nexusproc.FreeAddr(t), http: nexusproc.FreeAddr(t), admin: nexusproc.FreeAddr(t)}
	nexusproc.Start(t, "", n.admin, "serve",
		"--grpc-addr", n.grpc, "--http-addr", n.http, "--admin-addr", n.admin,
		"--admin-token", adminToken, "--data-dir", "data")
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

// upstream records the nexus headers each request brought.
func upstream(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{
			"path":     r.URL.Path,
			"subject":  r.Header.Get("X-Nexus-Subject"),
			"decision": r.Header.Get("X-Nexus-Decision"),
		})
	}))
	t.Cleanup(s.Close)
	return s
}

// TestProxiesInFrontOfNexus drives nginx (auth_request), Caddy
// (forward_auth) and HAProxy (a Lua check), each in front of the real nexus
// binary: RBAC allow, ReBAC allow through a folder three levels up, deny, a
// relationship written through the admin API turning a deny into an allow,
// and the policy's headers reaching the upstream.
func TestProxiesInFrontOfNexus(t *testing.T) {
	n := startLiveNexus(t)
	up := upstream(t)
	for _, kind := range proxy.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			if _, err := proxy.Binary(kind); err != nil {
				t.Fatalf("%s is not installed (make deps installs it): %v", kind, err)
			}
			p := proxy.Start(t, proxy.Config{
				Kind: kind, Nexus: n.http, Upstream: strings.TrimPrefix(up.URL, "http://"),
				UpstreamHeaders: []string{"X-Nexus-Subject", "X-Nexus-Decision"},
			})
			get := func(path, user string) (int, map[string]string) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, p.URL+path, nil)
				req.Header.Set("X-User", user)
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
			status, seen := get("/tenants/acme/files/report.pdf", "alice")
			if status != 200 || seen["decision"] != "rbac" || seen["subject"] != "alice" {
				t.Fatalf("RBAC allow: %d %v\n%s", status, seen, p.Output())
			}
			status, seen = get("/files/report.pdf", "bob")
			if status != 200 || seen["decision"] != "rebac" || seen["subject"] != "bob" {
				t.Fatalf("ReBAC allow (folder three levels up): %d %v", status, seen)
			}
			user := "nobody-" + string(kind)
			if status, _ := get("/files/report.pdf", user); status != 403 {
				t.Fatalf("deny: %d, want 403", status)
			}
			n.write(t, "folder:projects#viewer@user:"+user)
			status, seen = get("/files/report.pdf", user)
			if status != 200 || seen["subject"] != user || seen["decision"] != "rebac" {
				t.Fatalf("after the write: %d %v, want an allow", status, seen)
			}
			// A client cannot forge the policy's headers for the upstream.
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/files/report.pdf", nil)
			req.Header.Set("X-User", "bob")
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

// istioCheck is a CheckRequest as Envoy in an Istio sidecar sends it.
func istioCheck(method, path, user string) *authv3.CheckRequest {
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
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: sock("10.244.0.12", 45678), Principal: "spiffe://cluster.local/ns/default/sa/web"},
		Destination: &authv3.AttributeContext_Peer{Address: sock("10.244.0.19", 8080), Principal: "spiffe://cluster.local/ns/default/sa/drive"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "8421379", Method: method, Path: path, Host: "drive.default.svc.cluster.local:8080",
			Scheme: "http", Protocol: "HTTP/1.1", Headers: headers,
		}},
		ContextExtensions: map[string]string{"virtual_host": "inbound|http|8080"},
	}}
}

// TestEnvoyShapedGRPC sends CheckRequests shaped as Envoy and Istio send
// them to the real binary over gRPC.
func TestEnvoyShapedGRPC(t *testing.T) {
	n := startLiveNexus(t)
	conn, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := authv3.NewAuthorizationClient(conn)
	tests := []struct {
		name, method, path, user string
		wantCode                 codes.Code
		wantHTTP                 int32
	}{
		{"rbac", "DELETE", "/tenants/acme/folders/q3", "alice", codes.OK, 0},
		{"rebac-depth-3", "GET", "/files/report.pdf", "bob", codes.OK, 0},
		{"deny", "PUT", "/files/report.pdf", "bob", codes.PermissionDenied, 403},
		{"no-subject", "GET", "/files/report.pdf", "", codes.PermissionDenied, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := client.Check(ctx, istioCheck(tt.method, tt.path, tt.user))
			if err != nil {
				t.Fatal(err)
			}
			if got := codes.Code(resp.GetStatus().GetCode()); got != tt.wantCode {
				t.Fatalf("status %v, want %v (%v)", got, tt.wantCode, resp)
			}
			if tt.wantHTTP != 0 && int32(resp.GetDeniedResponse().GetStatus().GetCode()) != tt.wantHTTP {
				t.Fatalf("denied HTTP status %d, want %d", resp.GetDeniedResponse().GetStatus().GetCode(), tt.wantHTTP)
			}
		})
	}
}
