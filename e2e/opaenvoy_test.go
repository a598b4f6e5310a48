package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// opaQuickStartPolicy is a policy in the shape of opa-envoy-plugin's
// quick start: GET under /people is allowed, everything else denied.
const opaQuickStartPolicy = `package envoy.authz

import input.attributes.request.http as http_request

default allow := false

allow if {
	http_request.method == "GET"
	glob.match("/people*", [], http_request.path)
}
`

// TestOPAEnvoyQuickStart starts the real nexus binary with the arguments
// opa-envoy-plugin's quick start gives opa run (only the ports changed,
// so that tests running at the same time do not collide) and checks an
// allow and a deny over ext_authz gRPC, and the probe the quick start's
// Deployment uses.
func TestOPAEnvoyQuickStart(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"config", "policy"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	grpcAddr := nexusproc.FreeAddr(t)
	_, grpcPort, _ := net.SplitHostPort(grpcAddr)
	_, httpPort, _ := net.SplitHostPort(nexusproc.FreeAddr(t))
	diag := nexusproc.FreeAddr(t)
	_, diagPort, _ := net.SplitHostPort(diag)
	config := filepath.Join(dir, "config", "config.yaml")
	policy := filepath.Join(dir, "policy", "policy.rego")
	if err := os.WriteFile(config, []byte("plugins:\n  envoy_ext_authz_grpc:\n    addr: :"+grpcPort+"\n    path: envoy/authz/allow\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte(opaQuickStartPolicy), 0o644); err != nil {
		t.Fatal(err)
	}

	p := nexusproc.Start(t, dir, diag,
		"run",
		"--server",
		"--config-file="+config,
		"--addr=localhost:"+httpPort,
		"--diagnostic-addr=0.0.0.0:"+diagPort,
		"--ignore=.*",
		policy,
	)

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := authv3.NewAuthorizationClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		method, path string
		want         codes.Code
	}{
		{"GET", "/people", codes.OK},
		{"POST", "/people", codes.PermissionDenied},
	} {
		resp, err := client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: tc.method, Path: tc.path, Host: "example.com",
				Headers: map[string]string{":method": tc.method, ":path": tc.path, ":authority": "example.com"},
			}},
		}})
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", tc.method, tc.path, err, p.Output.String())
		}
		if got := codes.Code(resp.GetStatus().GetCode()); got != tc.want {
			t.Errorf("%s %s: %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}

	resp, err := http.Get("http://" + diag + "/health?plugins")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health?plugins: %d, want 200", resp.StatusCode)
	}

	sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer scancel()
	if err := p.Stop(sctx); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Output.String())
	}
	if !strings.Contains(p.Output.String(), `"msg":"nexus ready"`) {
		t.Errorf("the log is not opa run's JSON:\n%s", p.Output.String())
	}
}
