package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseDecisionPath(t *testing.T) {
	for _, tc := range []struct {
		name, plugin, want string
	}{
		{"default", `{}`, "envoy/authz/allow"},
		{"slash", `{"path": "envoy/authz/allow"}`, "envoy/authz/allow"},
		{"leading-slash", `{"path": "/envoy/authz/allow"}`, "envoy/authz/allow"},
		{"both-slashes", `{"path": "/istio/authz/allow/"}`, "istio/authz/allow"},
		{"data-ref", `{"path": "data.envoy.authz.allow"}`, "envoy/authz/allow"},
		{"dotted", `{"path": "envoy.authz.allow"}`, "envoy/authz/allow"},
		{"segment-with-dots", `{"path": "test/com.foo.envoy.ingress/allow/main"}`, "test/com.foo.envoy.ingress/allow/main"},
		{"query", `{"query": "data.envoy.authz.allow"}`, "envoy/authz/allow"},
		{"query-package", `{"query": "data.test"}`, "test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(`{"plugins": {"envoy_ext_authz_grpc": ` + tc.plugin + `}}`))
			if err != nil {
				t.Fatal(err)
			}
			if c.Envoy.Entrypoint != tc.want {
				t.Fatalf("entrypoint %q, want %q", c.Envoy.Entrypoint, tc.want)
			}
		})
	}
}

// TestParseQuickStart: the configuration of opa-envoy-plugin's quick
// start, in YAML, with the plugin's defaults filled in.
func TestParseQuickStart(t *testing.T) {
	c, err := Parse([]byte(`
plugins:
  envoy_ext_authz_grpc:
    addr: :9191
    path: envoy/authz/allow
decision_logs:
  console: true
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &EnvoyPlugin{
		Addr: ":9191", Entrypoint: "envoy/authz/allow", LogPath: "envoy/authz/allow",
		GRPCMaxRecvMsgSize: 4 << 20, GRPCMaxSendMsgSize: 1<<31 - 1,
		GRPCRequestDurationSecondsBuckets: []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 3e-3, 5e-3, 0.1, 1},
	}
	if !reflect.DeepEqual(c.Envoy, want) {
		t.Fatalf("plugin %+v\nwant   %+v", c.Envoy, want)
	}
	if string(c.DecisionLogs) != `{"console":true}` {
		t.Fatalf("decision_logs kept as %s", c.DecisionLogs)
	}
	if c.Bundles != nil || c.Status != nil || c.Keys != nil || c.Nexus != nil {
		t.Fatalf("absent sections kept: %+v", c)
	}
}

func TestParseEverySetting(t *testing.T) {
	c, err := Parse([]byte(`{
  "services": [{"name": "acme", "url": "https://bundles.example.com"}],
  "labels": {"app": "shop", "region": "eu"},
  "plugins": {"envoy_ext_authz_grpc": {
    "addr": "grpc://0.0.0.0:9292", "path": "istio/authz/allow", "dry-run": true,
    "enable-reflection": true, "skip-request-body-parse": true,
    "grpc-max-recv-msg-size": 1000, "grpc-max-send-msg-size": 2000,
    "enable-performance-metrics": true, "grpc-request-duration-seconds-buckets": [1e-5, 0.2, 1, 5]}},
  "bundles": {"authz": {"service": "acme", "resource": "bundle.tar.gz"}},
  "keys": {"k": {"algorithm": "RS256"}},
  "status": {"service": "acme"},
  "default_decision": "/system/main",
  "default_authorization_decision": "system/authz/allow",
  "persistence_directory": "/var/opa",
  "nd_builtin_cache": false,
  "server": {},
  "distributed_tracing": {"type": "none"},
  "nexus": {"cache_size": 10}
}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &EnvoyPlugin{
		Addr: "0.0.0.0:9292", Entrypoint: "istio/authz/allow", LogPath: "istio/authz/allow", DryRun: true, EnableReflection: true,
		SkipRequestBodyParse: true, GRPCMaxRecvMsgSize: 1000, GRPCMaxSendMsgSize: 2000,
		EnablePerformanceMetrics: true, GRPCRequestDurationSecondsBuckets: []float64{1e-5, 0.2, 1, 5},
	}
	if !reflect.DeepEqual(c.Envoy, want) {
		t.Fatalf("plugin %+v\nwant   %+v", c.Envoy, want)
	}
	if c.Services["acme"] == nil || c.Labels["region"] != "eu" || c.PersistenceDirectory != "/var/opa" {
		t.Fatalf("config %+v", c)
	}
	for name, r := range map[string][]byte{"bundles": c.Bundles, "keys": c.Keys, "status": c.Status, "nexus": c.Nexus} {
		if len(r) == 0 {
			t.Errorf("%s not kept", name)
		}
	}
}

func TestParseNoPlugin(t *testing.T) {
	c, err := Parse([]byte("labels:\n  app: x\n"))
	if err != nil || c.Envoy != nil {
		t.Fatalf("Parse = %+v, %v; want no plugin", c, err)
	}
	if c, err := Parse(nil); err != nil || c.Envoy != nil {
		t.Fatalf("empty file: %+v, %v", c, err)
	}
	if c, err := Parse([]byte(`{"plugins": {"envoy_ext_authz_grpc": null}}`)); err != nil || c.Envoy == nil || c.Envoy.Addr != ":9191" {
		t.Fatalf("plugin with no settings: %+v, %v; want the defaults", c, err)
	}
}

func TestParseRefuses(t *testing.T) {
	plugin := func(s string) string { return `{"plugins": {"envoy_ext_authz_grpc": ` + s + `}}` }
	for _, tc := range []struct {
		name, raw, want string
		unsupported     bool
	}{
		{"unknown-key", `{"plugin": {}}`, "config: plugin: unknown setting", false},
		{"other-plugin", `{"plugins": {"my_plugin": {}}}`, "config: plugins.my_plugin: unknown setting (known: envoy_ext_authz_grpc)", false},
		{"discovery", `{"discovery": {"service": "acme"}}`, "config: discovery: not supported by nexus", true},
		{"metrics-export", `{"metrics_export": {}}`, "config: metrics_export: not supported by nexus", true},
		{"server-encoding", `{"server": {"encoding": {"gzip": {"min_length": 1024}}}}`, "config: server.encoding: not supported by nexus", true},
		{"server-unknown", `{"server": {"cors": {}}}`, "config: server.cors: unknown setting", false},
		{"storage-disk", `{"storage": {"disk": {"directory": "/x"}}}`, "config: storage.disk: not supported by nexus", true},
		{"caching", `{"caching": {"inter_query_builtin_cache": {"max_size_bytes": 10}}}`, "config: caching.inter_query_builtin_cache: not supported by nexus", true},
		{"nd-builtin-cache", `{"nd_builtin_cache": true}`, "config: nd_builtin_cache: not supported by nexus", true},
		{"tracing", `{"distributed_tracing": {"type": "grpc", "address": "otel:4317"}}`, "config: distributed_tracing.address: not supported by nexus", true},
		{"tracing-type", `{"distributed_tracing": {"type": "http"}}`, `config: distributed_tracing.type "http": not supported by nexus`, true},
		{"default-decision", `{"default_decision": "/http/example/authz/allow"}`, `config: default_decision "/http/example/authz/allow": not supported by nexus`, true},
		{"default-authz-decision", `{"default_authorization_decision": "/mine/allow"}`, `config: default_authorization_decision "/mine/allow": not supported by nexus`, true},
		{"labels-not-strings", `{"labels": {"n": 1}}`, "config: labels.n: want a string, got a number", false},
		{"services", `{"services": {"a": {"url": "ftp://x"}}}`, "config: services.a.url: want an http or https URL", false},
		{"path-and-query", plugin(`{"path": "envoy/authz/allow", "query": "data.envoy.authz.allow"}`), "config: plugins.envoy_ext_authz_grpc.path and query: set only path", false},
		{"query-expression", plugin(`{"query": "data.envoy.authz.allow == true"}`), `config: plugins.envoy_ext_authz_grpc.query "data.envoy.authz.allow == true": not supported by nexus`, true},
		{"query-not-data", plugin(`{"query": "input.x"}`), `plugins.envoy_ext_authz_grpc.query "input.x": not supported by nexus`, true},
		{"path-empty", plugin(`{"path": "/"}`), `config: plugins.envoy_ext_authz_grpc.path "/" names no rule`, false},
		{"path-brackets", plugin(`{"path": "envoy/authz[\"x\"]"}`), `plugins.envoy_ext_authz_grpc.path "envoy/authz[\"x\"]": segment`, false},
		{"proto-descriptor", plugin(`{"proto-descriptor": "/testsrv.pb"}`), "config: plugins.envoy_ext_authz_grpc.proto-descriptor: not supported by nexus", true},
		{"plugin-unknown", plugin(`{"dryrun": true}`), "config: plugins.envoy_ext_authz_grpc.dryrun: unknown setting", false},
		{"dry-run-string", plugin(`{"dry-run": "yes"}`), "config: plugins.envoy_ext_authz_grpc.dry-run: json: cannot unmarshal string", false},
		{"recv-zero", plugin(`{"grpc-max-recv-msg-size": 0}`), "config: plugins.envoy_ext_authz_grpc.grpc-max-recv-msg-size: want a positive number of bytes, got 0", false},
		{"send-negative", plugin(`{"grpc-max-send-msg-size": -1}`), "config: plugins.envoy_ext_authz_grpc.grpc-max-send-msg-size: want a positive number of bytes, got -1", false},
		{"buckets", plugin(`{"grpc-request-duration-seconds-buckets": [1, 0.5]}`), "config: plugins.envoy_ext_authz_grpc.grpc-request-duration-seconds-buckets: want increasing bounds", false},
		{"addr-scheme", plugin(`{"addr": "http://0.0.0.0:9191"}`), `config: plugins.envoy_ext_authz_grpc.addr: "http://0.0.0.0:9191": the scheme must be grpc or unix`, false},
		{"addr-port-only", plugin(`{"addr": "9191"}`), `config: plugins.envoy_ext_authz_grpc.addr: "9191": want host:port`, false},
		{"not-a-mapping", `[1, 2]`, "config: want a mapping of settings", false},
		{"bad-yaml", "plugins: [\n", "config: yaml:", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.raw))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error %v, want one containing %q", err, tc.want)
			}
			if errors.Is(err, ErrUnsupported) != tc.unsupported {
				t.Fatalf("errors.Is(%v, ErrUnsupported) = %v, want %v", err, !tc.unsupported, tc.unsupported)
			}
		})
	}
}

// TestParseDefaultDecisionMatchingPath: a default_decision that names the
// plugin's own decision asks nothing more and is accepted.
func TestParseDefaultDecisionMatchingPath(t *testing.T) {
	_, err := Parse([]byte(`{"default_decision": "envoy/authz/allow", "plugins": {"envoy_ext_authz_grpc": {"path": "/envoy/authz/allow"}}}`))
	if err != nil {
		t.Fatal(err)
	}
}

func TestParseEnv(t *testing.T) {
	t.Setenv("NEXUS_TEST_ADDR", "0.0.0.0:9393")
	t.Setenv("NEXUS_TEST_EMPTY", "")
	os.Unsetenv("NEXUS_TEST_UNSET")
	c, err := Parse([]byte(`
labels:
  empty: "${NEXUS_TEST_EMPTY}"
  missing: "${NEXUS_TEST_UNSET}"
  two: "${NEXUS_TEST_UNSET}-${NEXUS_TEST_EMPTY}x"
  none: "a${}b"
plugins:
  envoy_ext_authz_grpc:
    addr: ${NEXUS_TEST_ADDR}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Envoy.Addr != "0.0.0.0:9393" {
		t.Errorf("addr %q, want the variable's value", c.Envoy.Addr)
	}
	want := map[string]string{"empty": "", "missing": "${NEXUS_TEST_UNSET}", "two": "${NEXUS_TEST_UNSET}-x", "none": "ab"}
	if !reflect.DeepEqual(c.Labels, want) {
		t.Errorf("labels %v, want %v", c.Labels, want)
	}
	if !reflect.DeepEqual(c.MissingEnv, []string{"NEXUS_TEST_UNSET"}) {
		t.Errorf("MissingEnv %v", c.MissingEnv)
	}
}

// TestLoadOverrides: opa run's --set and --set-file over the file, as the
// plugin's examples pass them.
func TestLoadOverrides(t *testing.T) {
	t.Setenv("NEXUS_TEST_PORT", "9595")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]byte("plugins:\n  envoy_ext_authz_grpc:\n    addr: :9191\n    path: envoy/authz/allow\n"), Overrides{
		Set: []string{
			"plugins.envoy_ext_authz_grpc.addr=0.0.0.0:${NEXUS_TEST_PORT}",
			"plugins.envoy_ext_authz_grpc.query=data.envoy.authz.allow,plugins.envoy_ext_authz_grpc.path=",
			"plugins.envoy_ext_authz_grpc.enable-reflection=true",
			"plugins.envoy_ext_authz_grpc.grpc-max-recv-msg-size=1024",
			`labels.dotted\.key=a\,b`,
		},
		SetFile: []string{"labels.token=" + tokenFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Envoy
	if p.Addr != "0.0.0.0:9595" || p.Entrypoint != "envoy/authz/allow" || !p.EnableReflection || p.GRPCMaxRecvMsgSize != 1024 {
		t.Fatalf("plugin %+v", p)
	}
	if c.Labels["dotted.key"] != "a,b" || c.Labels["token"] != "s3cret" {
		t.Fatalf("labels %v", c.Labels)
	}

	for _, tc := range []struct {
		o    Overrides
		want string
	}{
		{Overrides{Set: []string{"plugins.envoy_ext_authz_grpc"}}, `--set "plugins.envoy_ext_authz_grpc": want key=value`},
		{Overrides{Set: []string{"services[0].url=x"}}, `lists: not supported by nexus`},
		{Overrides{Set: []string{"plugins..addr=x"}}, `--set "plugins..addr": empty key`},
		{Overrides{SetFile: []string{"labels.x=" + filepath.Join(dir, "absent")}}, `--set-file labels.x: open`},
		{Overrides{Set: []string{"plugins.envoy_ext_authz_grpc.dry-run=maybe"}}, `plugins.envoy_ext_authz_grpc.dry-run: json: cannot unmarshal string`},
	} {
		if _, err := Load(nil, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%v) = %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
}

func TestIsOPAConfig(t *testing.T) {
	for raw, want := range map[string]bool{
		"plugins:\n  envoy_ext_authz_grpc: {}\n":  true,
		`{"decision_logs": {"console": true}}`:    true,
		"nexus:\n  cache_size: 1\nservices: {}\n": true,
		"grpc_addr: :9191\ndata_dir: /x\n":        false,
		"nexus:\n  cache_size: 1\n":               true,
		"":                                        false,
	} {
		if got := IsOPAConfig([]byte(raw)); got != want {
			t.Errorf("IsOPAConfig(%q) = %v, want %v", raw, got, want)
		}
	}
}
