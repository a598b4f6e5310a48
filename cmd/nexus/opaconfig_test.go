package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nexuspdp/nexus/internal/cli"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	"github.com/nexuspdp/nexus/pdp"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// quickStartPolicy is a policy in the shape of opa-envoy-plugin's quick
// start: GET on /people is allowed, and so is anything whose JSON body
// says {"admin": true}.
const quickStartPolicy = `package envoy.authz

import input.attributes.request.http as http_request

default allow := false

allow if {
	http_request.method == "GET"
	glob.match("/people*", [], http_request.path)
}

allow if input.parsed_body.admin == true
`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServeFromOPA(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		run       bool
		check     func(t *testing.T, c serveConfig)
		wantErr   string
	}{
		{name: "quick-start-plugin", raw: "plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: envoy/authz/allow\n", check: func(t *testing.T, c serveConfig) {
			if c.Server.GRPCAddr != ":9191" || c.Core.EnvoyEntrypoint != "envoy/authz/allow" || c.Core.AuthzEntrypoint != pdp.Disabled ||
				!equal(c.Entrypoints, []string{"envoy/authz/allow"}) || c.Server.AdminAddr != "" {
				t.Fatalf("%+v", c)
			}
			if c.Server.GRPCMaxRecvMsgSize != 4<<20 || c.Core.MaxBodyBytes != 4<<20 || c.Core.DryRun {
				t.Fatalf("plugin defaults %+v", c.opa)
			}
		}},
		{name: "istio", raw: "plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: istio/authz/allow\n", run: true, check: func(t *testing.T, c serveConfig) {
			if c.Core.EnvoyEntrypoint != "istio/authz/allow" || c.Server.AdminAddr != "-" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "nexus-section", raw: `{"plugins": {"envoy_ext_authz_grpc": {"addr": ":9191", "dry-run": true}},
			"labels": {"app": "shop"}, "persistence_directory": "/var/lib/opa",
			"nexus": {"authz_entrypoint": "app/decision", "cache_size": 7, "max_body_bytes": 1000, "eval_timeout": "250ms", "admin_addr": "127.0.0.1:8282"}}`, run: true,
			check: func(t *testing.T, c serveConfig) {
				if c.Core.AuthzEntrypoint != "app/decision" || !equal(c.Entrypoints, []string{"envoy/authz/allow", "app/decision"}) ||
					c.Core.CacheSize != 7 || c.Core.MaxBodyBytes != 1000 || c.Core.EvalTimeout != 250*time.Millisecond || c.Server.AdminAddr != "127.0.0.1:8282" ||
					c.DataDir != "/var/lib/opa" || c.opa.Labels["app"] != "shop" || !c.Core.DryRun {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "no-plugin-run", raw: "labels:\n  a: b\n", run: true, check: func(t *testing.T, c serveConfig) {
			if c.Server.GRPCAddr != "-" {
				t.Fatalf("grpc %q: without the plugin opa run serves no ext_authz", c.Server.GRPCAddr)
			}
		}},
		{name: "no-plugin-serve", raw: "labels:\n  a: b\n", check: func(t *testing.T, c serveConfig) {
			if c.Server.GRPCAddr != "" {
				t.Fatalf("grpc %q: serve keeps its own default", c.Server.GRPCAddr)
			}
		}},
		{name: "addr-twice", raw: `{"plugins": {"envoy_ext_authz_grpc": {"addr": ":9191"}}, "nexus": {"grpc_addr": ":9292"}}`,
			wantErr: `plugins.envoy_ext_authz_grpc.addr ":9191" and nexus.grpc_addr ":9292" disagree`},
		{name: "path-twice", raw: `{"plugins": {"envoy_ext_authz_grpc": {"path": "a/b"}}, "nexus": {"envoy_entrypoint": "c/d"}}`,
			wantErr: `plugins.envoy_ext_authz_grpc.path "a/b" and nexus.envoy_entrypoint "c/d" disagree`},
		{name: "data-dir-twice", raw: `{"persistence_directory": "/a", "nexus": {"data_dir": "/b"}}`,
			wantErr: `persistence_directory "/a" and nexus.data_dir "/b" disagree`},
		{name: "nexus-unknown", raw: `{"plugins": {}, "nexus": {"grpc_adr": ":1"}}`, wantErr: `nexus: yaml: unmarshal errors`},
		{name: "decision-logs", raw: "plugins:\n  envoy_ext_authz_grpc: {}\ndecision_logs:\n  console: true\n  mask_decision: /acme/mask\n", check: func(t *testing.T, c serveConfig) {
			if eps := logRuleEntrypoints(c); !slices.Equal(eps, []string{"acme/mask", "system/log/drop"}) {
				t.Fatalf("log rules %v", eps)
			}
		}},
		{name: "status", raw: `{"status": {"console": true}}`, check: func(t *testing.T, c serveConfig) {
			if c.opa.Config == nil || c.opa.Config.Status == nil || !slices.Equal(logRuleEntrypoints(c), defaultLogRules) {
				t.Fatalf("settings %+v", c.opa)
			}
		}},
		{name: "deprecated bundle", raw: `{"bundle": {"name": "authz", "service": "s"}}`, wantErr: "bundle: not supported yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := opaconfig.Parse([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			c, err := serveFromOPA(cfg, tc.run)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestReadServeConfigKinds: an OPA configuration is read as one, nexus'
// own YAML as before.
func TestReadServeConfigKinds(t *testing.T) {
	dir := t.TempDir()
	c, err := readServeConfig(writeFile(t, dir, "opa.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n"))
	if err != nil || c.Server.GRPCAddr != ":9191" || c.Core.EnvoyEntrypoint != "envoy/authz/allow" {
		t.Fatalf("OPA config: %+v, %v", c, err)
	}
	c, err = readServeConfig(writeFile(t, dir, "nexus.yaml", "grpc_addr: :9292\n"))
	if err != nil || c.Server.GRPCAddr != ":9292" || c.Core.EnvoyEntrypoint != "" {
		t.Fatalf("nexus config: %+v, %v", c, err)
	}
	_, err = readServeConfig(writeFile(t, dir, "bad.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    proto-descriptor: /x.pb\n"))
	if err == nil || !strings.Contains(err.Error(), "plugins.envoy_ext_authz_grpc.proto-descriptor: not supported by nexus") || !strings.Contains(err.Error(), "bad.yaml") {
		t.Fatalf("refused setting: %v", err)
	}
}

// TestRunArgs: the argument lists of opa-envoy-plugin's documented
// deployments map onto serve's settings.
func TestRunArgs(t *testing.T) {
	dir := t.TempDir()
	policy := writeFile(t, dir, "policy.rego", quickStartPolicy)
	quick := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: envoy/authz/allow\n")
	istio := writeFile(t, dir, "istio.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: istio/authz/allow\n")
	uds := writeFile(t, dir, "uds.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: unix:///run/opa/sockets/opa.sock\n    path: envoy/authz/allow\n")
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, c serveConfig)
	}{
		{"quick-start", []string{"--server", "--config-file=" + quick, "--addr=localhost:8181", "--diagnostic-addr=0.0.0.0:8282", "--ignore=.*", policy},
			func(t *testing.T, c serveConfig) {
				if c.Server.GRPCAddr != ":9191" || c.Server.HTTPAddr != "localhost:8181" || c.Server.DiagnosticAddr != "0.0.0.0:8282" || c.Server.AdminAddr != "-" ||
					c.Policy != policy || c.Core.EnvoyEntrypoint != "envoy/authz/allow" || c.opa.LogFormat != "json" || c.LogLevel != "info" {
					t.Fatalf("%+v", c)
				}
			}},
		{"istio", []string{"--server", "--config-file=" + istio, "--addr=0.0.0.0:8181", "--diagnostic-addr=0.0.0.0:8282", policy},
			func(t *testing.T, c serveConfig) {
				if c.Core.EnvoyEntrypoint != "istio/authz/allow" || c.Server.HTTPAddr != "0.0.0.0:8181" {
					t.Fatalf("%+v", c)
				}
			}},
		{"envoy-uds", []string{"--server", "--config-file=" + uds, "--addr=0.0.0.0:8181", "--diagnostic-addr=0.0.0.0:8282", "--ignore=.*", policy},
			func(t *testing.T, c serveConfig) {
				if c.Server.GRPCAddr != "unix:///run/opa/sockets/opa.sock" {
					t.Fatalf("%+v", c)
				}
			}},
		{"gloo-edge", []string{"--server", "--addr=0.0.0.0:8181", "--set=plugins.envoy_ext_authz_grpc.addr=0.0.0.0:9191",
			"--set=plugins.envoy_ext_authz_grpc.query=data.envoy.authz.allow", "--set=plugins.envoy_ext_authz_grpc.enable-reflection=true", "--ignore=.*", policy},
			func(t *testing.T, c serveConfig) {
				if c.Server.GRPCAddr != "0.0.0.0:9191" || c.Core.EnvoyEntrypoint != "envoy/authz/allow" || !c.Server.Reflection {
					t.Fatalf("%+v", c)
				}
			}},
		{"flags", []string{"-s", "-c", quick, "-l", "debug", "--log-format=text", "--shutdown-grace-period=3", "-b", "--skip-version-check", policy},
			func(t *testing.T, c serveConfig) {
				if c.LogLevel != "debug" || c.opa.LogFormat != "text" || c.ShutdownGrace != 3*time.Second || c.Server.HTTPAddr != "localhost:8181" {
					t.Fatalf("%+v", c)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := runArgs(tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// runArgs runs nexus run's command line up to the settings it would
// serve with.
func runArgs(args ...string) (serveConfig, error) {
	var got serveConfig
	root := newRootCmd()
	for _, c := range root.Commands() {
		if c.Name() == "run" {
			root.RemoveCommand(c)
		}
	}
	root.AddCommand(runCommand(func(_ context.Context, c serveConfig, _ io.Writer) error { got = c; return nil }))
	cli.Scriptable(root)
	root.SetArgs(append([]string{"run"}, args...))
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.Execute()
	return got, err
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	policy := writeFile(t, dir, "policy.rego", quickStartPolicy)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{policy}, "nexus run needs --server"},
		{[]string{"--server"}, "give the policy"},
		{[]string{"--server", policy, policy}, "2 policy paths"},
		{[]string{"--server", "--watch", policy}, "--watch: not supported by nexus"},
		{[]string{"--server", "-w", policy}, "--watch: not supported by nexus"},
		{[]string{"--server", "--authentication=token", policy}, "--authentication: not supported by nexus"},
		{[]string{"--server", "--h2c", policy}, "--h2c: not supported by nexus"},
		{[]string{"--server", "--no-such-flag", policy}, "unknown flag: --no-such-flag"},
		{[]string{"--server", "--addr=:8181", "--addr=:8182", policy}, "nexus has one HTTP listener"},
		{[]string{"--server", "--addr=unix:///tmp/opa.sock", policy}, "want host:port"},
		{[]string{"--server", "--diagnostic-addr=a:1,b:2", policy}, "--diagnostic-addr a:1,b:2: give one address"},
		{[]string{"--server", "--log-format=xml", policy}, `--log-format "xml"`},
		{[]string{"--server", "--log-level=loud", policy}, `log level "loud"`},
		{[]string{"--server", "--tls-cert-file=c.pem", policy}, "--tls-cert-file and --tls-private-key-file go together"},
		{[]string{"--server", "--ignore=.*", "--ignore=[a-", dir}, `--ignore: ignore pattern "[a-": syntax error in pattern`},
		{[]string{"--server", "--ignore=.*", "--config-file=" + writeFile(t, dir, "ignore.yaml", "nexus:\n  policy_ignore: [vendor]\n"), dir}, "--ignore .* and nexus.policy_ignore vendor disagree"},
		{[]string{"--server", "--config-file=" + filepath.Join(dir, "absent.yaml"), policy}, "--config-file:"},
		{[]string{"--server", "--set=plugins.envoy_ext_authz_grpc.proto-descriptor=/x.pb", policy}, "plugins.envoy_ext_authz_grpc.proto-descriptor: not supported by nexus"},
		{[]string{"--server", "--set=decision_logs.plugin=x", "--set=plugins.envoy_ext_authz_grpc.addr=:9191", policy}, "decision_logs.plugin: not supported by nexus"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := runArgs(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one containing %q", err, tc.want)
			}
			if cli.ExitCode(err) != 2 {
				t.Fatalf("exit code %d, want 2 (a wrong invocation)", cli.ExitCode(err))
			}
		})
	}
}

// nexusProc is nexus run in process, as its command line starts it.
type nexusProc struct {
	log   *fixture.SyncBuffer
	addrs map[string]string
}

var listening = regexp.MustCompile(`listener"?[=:]"?([a-z]+)"?[ ,]"?addr"?[=:]"?([^"\s]+)`)

// startNexus runs the nexus command line args in process until the test
// ends, and waits until it is ready.
func startNexus(t *testing.T, args ...string) *nexusProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &nexusProc{log: &fixture.SyncBuffer{}, addrs: map[string]string{}}
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(p.log)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("nexus %s: %v", strings.Join(args, " "), err)
		}
	})
	deadline := time.After(60 * time.Second)
	for !strings.Contains(p.log.String(), "nexus ready") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("nexus %s ended: %v\n%s", strings.Join(args, " "), err, p.log.String())
		case <-deadline:
			t.Fatalf("nexus not ready:\n%s", p.log.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, m := range listening.FindAllStringSubmatch(p.log.String(), -1) {
		p.addrs[m[1]] = m[2]
	}
	return p
}

func (p *nexusProc) client(t *testing.T) authv3.AuthorizationClient {
	t.Helper()
	addr := p.addrs["grpc"]
	if addr == "" {
		t.Fatalf("no gRPC listener:\n%s", p.log.String())
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

func check(method, path, body string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1", Method: method, Path: path, Host: "example.com", Scheme: "http", Protocol: "HTTP/1.1",
			Headers: map[string]string{":method": method, ":path": path, "content-type": "application/json"}, Body: body,
		}},
	}}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunQuickStart: nexus run with opa-envoy-plugin's quick start
// arguments and configuration decides over real gRPC, and answers the
// quick start's probes (/health?plugins) on the diagnostic address.
func TestRunQuickStart(t *testing.T) {
	dir := t.TempDir()
	policy := writeFile(t, dir, "policy.rego", quickStartPolicy)
	config := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: envoy/authz/allow\nnexus:\n  data_dir: "+filepath.Join(dir, "data")+"\n")
	p := startNexus(t, "run", "--server", "--config-file="+config, "--addr=127.0.0.1:0", "--diagnostic-addr=127.0.0.1:0",
		"--set=plugins.envoy_ext_authz_grpc.addr=127.0.0.1:0", "--ignore=.*", policy)
	c := p.client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		method, path string
		allow        bool
	}{{"GET", "/people", true}, {"GET", "/people/1", true}, {"POST", "/people", false}, {"GET", "/admin", false}} {
		resp, err := c.Check(ctx, check(tc.method, tc.path, ""))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetStatus().GetCode() == int32(codes.OK); got != tc.allow {
			t.Errorf("%s %s: allowed %v, want %v", tc.method, tc.path, got, tc.allow)
		}
	}
	if code, body := get(t, "http://"+p.addrs["diagnostic"]+"/health?plugins"); code != 200 || strings.TrimSpace(body) != "{}" {
		t.Errorf("/health?plugins = %d %q", code, body)
	}
	if _, ok := p.addrs["admin"]; ok {
		t.Errorf("nexus run started an admin listener")
	}
	if !strings.Contains(p.log.String(), `"msg":"listening"`) {
		t.Errorf("the log is not JSON (opa run's default):\n%s", p.log.String())
	}
}

// TestServeOPAConfig: nexus serve --config with an OPA configuration
// setting every plugin option nexus implements: dry-run answers allow
// while the decision log records the denial, skip-request-body-parse
// hides the body from the policy, a message over grpc-max-recv-msg-size
// is refused, and the performance metrics are on /metrics.
func TestServeOPAConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "policy"), 0o755); err != nil {
		t.Fatal(err)
	}
	policy := writeFile(t, filepath.Join(dir, "policy"), "policy.rego", strings.Replace(quickStartPolicy, "package envoy.authz", "package istio.authz", 1))
	dlog := filepath.Join(dir, "decisions.log")
	config := writeFile(t, dir, "config.yaml", `
plugins:
  envoy_ext_authz_grpc:
    addr: 127.0.0.1:0
    path: istio/authz/allow
    dry-run: true
    skip-request-body-parse: true
    grpc-max-recv-msg-size: 8192
    enable-performance-metrics: true
    grpc-request-duration-seconds-buckets: [0.001, 0.25, 2]
nexus:
  http_addr: "-"
  admin_addr: 127.0.0.1:0
  data_dir: ${NEXUS_TEST_DATA_DIR}
  decision_log: `+dlog+`
`)
	t.Setenv("NEXUS_TEST_DATA_DIR", filepath.Join(dir, "data"))
	p := startNexus(t, "serve", "--config", config, "--policy", policy)
	c := p.client(t)
	ctx := context.Background()

	resp, err := c.Check(ctx, check("POST", "/people", `{"admin": true}`))
	if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("dry-run: %v, %v; want OK", resp, err)
	}
	resp, err = c.Check(ctx, check("GET", "/people", ""))
	if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
		t.Fatalf("allow: %v, %v", resp, err)
	}
	_, err = c.Check(ctx, check("POST", "/people", strings.Repeat("x", 10000)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("message over grpc-max-recv-msg-size: %v; want RESOURCE_EXHAUSTED", err)
	}

	// The decision log has the policy's decisions: the body was not seen,
	// so {"admin": true} did not allow.
	var allowed []bool
	deadline := time.Now().Add(5 * time.Second)
	for len(allowed) < 2 && time.Now().Before(deadline) {
		allowed = allowed[:0]
		b, _ := os.ReadFile(dlog)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var ev struct {
				Allowed bool `json:"allowed"`
			}
			if json.Unmarshal([]byte(line), &ev) == nil && line != "" {
				allowed = append(allowed, ev.Allowed)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(allowed) != 2 || allowed[0] || !allowed[1] {
		t.Fatalf("decision log decisions %v, want [false true]", allowed)
	}

	code, body := get(t, "http://"+p.addrs["admin"]+"/metrics")
	for _, want := range []string{
		`grpc_request_duration_seconds_bucket{handler="check",le="0.25"}`,
		`grpc_request_duration_seconds_count{handler="check"} 2`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if !strings.Contains(p.log.String(), "dry-run") {
		t.Errorf("no dry-run warning in the log")
	}
}
