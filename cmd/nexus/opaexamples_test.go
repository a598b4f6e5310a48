package main

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nexuspdp/nexus/pdp"
)

// TestOPAExampleConfigs reads configurations written after
// opa-envoy-plugin's documented examples (testdata/opa) as nexus serve
// --config reads them.
func TestOPAExampleConfigs(t *testing.T) {
	for _, tc := range []struct {
		file    string
		want    func(c serveConfig) bool
		wantErr string
	}{
		{file: "quick-start.yaml", want: func(c serveConfig) bool {
			return c.Server.GRPCAddr == ":9191" && c.Core.EnvoyEntrypoint == "envoy/authz/allow" && c.opa.Config != nil && c.opa.Config.DecisionLogs != nil
		}},
		{file: "quick-start-no-logs.yaml", want: func(c serveConfig) bool {
			return c.Server.GRPCAddr == ":9191" && c.Core.EnvoyEntrypoint == "envoy/authz/allow" && c.Core.AuthzEntrypoint == pdp.Disabled && !c.Server.Reflection
		}},
		{file: "istio.yaml", want: func(c serveConfig) bool { return c.Core.EnvoyEntrypoint == "istio/authz/allow" }},
		{file: "envoy-uds.yaml", want: func(c serveConfig) bool {
			return c.Server.GRPCAddr == "unix:///run/opa/sockets/auth.sock" && c.Server.Reflection
		}},
		{file: "grpc-example.yaml", wantErr: "plugins.envoy_ext_authz_grpc.proto-descriptor: not supported by nexus"},
		{file: "tuned.json", want: func(c serveConfig) bool {
			return c.Server.GRPCAddr == "0.0.0.0:9191" && c.Core.EnvoyEntrypoint == "envoy/authz/allow" && c.Core.DryRun && c.Core.SkipRequestBodyParse &&
				c.Server.GRPCMaxRecvMsgSize == 8<<20 && c.Server.GRPCMaxSendMsgSize == 1<<31-1 && c.Server.PerformanceMetrics &&
				reflect.DeepEqual(c.Server.PerformanceMetricsBuckets, []float64{1e-5, 0.2, 1, 5}) && c.opa.Labels["env"] == "prod"
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := readServeConfig(filepath.Join("testdata", "opa", tc.file))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), tc.file) {
					t.Fatalf("err %v, want one naming %s and containing %q", err, tc.file, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(c) {
				t.Fatalf("settings %+v", c)
			}
		})
	}
}

// TestServeOPAUnixSocket: the envoy-uds example's addr serves ext_authz on
// a Unix socket with nexus serve --config.
func TestServeOPAUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "auth.sock")
	policy := writeFile(t, dir, "policy.rego", quickStartPolicy)
	config := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: unix://"+sock+"\n    path: envoy/authz/allow\n    enable-reflection: true\n")
	startNexus(t, "serve", "--config", config, "--policy", policy, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "-", "--admin-addr", "-")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := authv3.NewAuthorizationClient(conn)
	for _, tc := range []struct {
		method string
		want   codes.Code
	}{{"GET", codes.OK}, {"DELETE", codes.PermissionDenied}} {
		resp, err := c.Check(context.Background(), check(tc.method, "/people", ""))
		if err != nil || codes.Code(resp.GetStatus().GetCode()) != tc.want {
			t.Fatalf("%s /people over the socket: %v, %v; want %v", tc.method, resp, err, tc.want)
		}
	}
}
