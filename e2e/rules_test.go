package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/nexuspdp/nexus/e2e/internal/confcheck"
	"github.com/nexuspdp/nexus/e2e/internal/proxy"
)

// The files the rules read, relative to envoy/ (or to the repository root
// for the last three).
var (
	envoyFiles = []string{"envoy-ext-authz-grpc.yaml", "envoy-ext-authz-http.yaml", "envoy-wasm.yaml"}
	istioFiles = []string{"istio/authorization-policy.yaml", "istio/wasm-plugin.yaml"}
	kubeFiles  = []string{"kubernetes/nexus.yaml", "kubernetes/sidecar.yaml", "kubernetes/nexus-cluster.yaml"}
)

const (
	policyData   = "defaults/policy/data.json"
	pluginReadme = "plugin/README.md"
)

// ruleFiles are the files the rules read, relative to the repository root.
var ruleFiles = []string{"envoy", policyData, pluginReadme}

// repo is a repository root the rules read: the real one, or a copy with
// one change.
type repo string

// realRepo is the repository these tests run in.
var realRepo = repo(filepath.Join(envoyDir, ".."))

func (r repo) read(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(string(r), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envoy reads a file under envoy/.
func (r repo) envoy(t *testing.T, rel string) []byte {
	t.Helper()
	return r.read(t, filepath.Join("envoy", rel))
}

// policyDataHeaders returns the headers the default policy's data names:
// the tenant header and, if the data names one, the subject header.
func (r repo) policyDataHeaders(t *testing.T) (subject, tenant string) {
	t.Helper()
	var d struct {
		Nexus struct {
			SubjectHeader string `json:"subject_header"`
			TenantHeader  string `json:"tenant_header"`
		} `json:"nexus"`
	}
	if err := json.Unmarshal(r.read(t, policyData), &d); err != nil {
		t.Fatalf("%s: %v", policyData, err)
	}
	return strings.ToLower(d.Nexus.SubjectHeader), strings.ToLower(d.Nexus.TenantHeader)
}

// trustedHeader returns the subject header nexus trusts in a deployment:
// the --trusted-subject-header of its nexus serve command line, else the
// one the policy's data names.
func (r repo) trustedHeader(t *testing.T, flags map[string]string) string {
	t.Helper()
	if h := flags["trusted-subject-header"]; h != "" {
		return strings.ToLower(h)
	}
	h, _ := r.policyDataHeaders(t)
	return h
}

// composeNexusFlags returns the serve flags of the compose file's nexus
// service (its command, or its image's).
func (r repo) composeNexusFlags(t *testing.T) map[string]string {
	t.Helper()
	c, err := confcheck.ComposeFile(filepath.Join(string(r), "envoy", "docker-compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.Services["nexus"].Command
	if len(cmd) == 0 {
		stages, err := confcheck.DockerfileStages(r.envoy(t, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stages {
			if st.Name == "nexus" {
				cmd = st.Command
			}
		}
	}
	flags, _ := confcheck.ServeFlags(cmd)
	return flags
}

// kubeNexusFlags returns the serve flags of the nexus container of a
// Kubernetes file.
func kubeNexusFlags(t *testing.T, objs []confcheck.Object) map[string]string {
	t.Helper()
	for _, w := range confcheck.Workloads(objs) {
		for _, c := range w.Template.Spec.Containers {
			if flags, ok := confcheck.ServeFlags(append(append([]string{}, c.Command...), c.Args...)); ok {
				return flags
			}
		}
	}
	t.Fatal("no nexus serve container")
	return nil
}

func (r repo) manifests(t *testing.T, files ...string) []confcheck.Object {
	t.Helper()
	var all []confcheck.Object
	for _, f := range files {
		objs, err := confcheck.Manifests(context.Background(), r.envoy(t, f), istioCRDs(t))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, objs...)
	}
	return all
}

func (r repo) bootstrap(t *testing.T, file string) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := confcheck.EnvoyBootstrap(r.envoy(t, file))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return b
}

// policyHeaders returns the request headers the shipped policy reads in
// the compose deployment (Envoy) and in the Kubernetes one (Istio).
func (r repo) policyHeaders(t *testing.T, trusted string) []string {
	t.Helper()
	_, tenant := r.policyDataHeaders(t)
	var hs []string
	for _, h := range []string{trusted, tenant} {
		if h != "" {
			hs = append(hs, h)
		}
	}
	sort.Strings(hs)
	return hs
}

// deployRule is one check of what the deployment files mean, beyond their
// schemas.
type deployRule struct {
	name  string
	check func(t *testing.T) error
}

func perFile(files []string, f func(t *testing.T, file string) error) func(t *testing.T) error {
	return func(t *testing.T) error {
		var errs []error
		for _, file := range files {
			if err := f(t, file); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", file, err))
			}
		}
		return errors.Join(errs...)
	}
}

func deployRules(r repo) []deployRule {
	compose := func(t *testing.T) *confcheck.Compose {
		t.Helper()
		c, err := confcheck.ComposeFile(filepath.Join(string(r), "envoy", "docker-compose.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	envoyTrusted := func(t *testing.T) string { return r.trustedHeader(t, r.composeNexusFlags(t)) }
	kubeTrusted := func(t *testing.T) string {
		return r.trustedHeader(t, kubeNexusFlags(t, r.manifests(t, "kubernetes/nexus.yaml")))
	}
	return []deployRule{
		{"an HTTP authorization service receives every header the policy reads", func(t *testing.T) error {
			err := perFile(envoyFiles, func(t *testing.T, f string) error {
				return confcheck.AuthzHeaders(r.bootstrap(t, f), r.policyHeaders(t, envoyTrusted(t)))
			})(t)
			mc, merr := confcheck.IstiodMeshValues(r.envoy(t, "istio/istiod-values.yaml"))
			if merr != nil {
				return merr
			}
			return errors.Join(err, confcheck.MeshAuthzHeaders(mc, r.policyHeaders(t, kubeTrusted(t))))
		}},
		{"every Envoy file verifies a JWT and ext_authz gets what jwt_authn verified", perFile(envoyFiles, func(t *testing.T, f string) error {
			b := r.bootstrap(t, f)
			return errors.Join(confcheck.RequireJWT(b), confcheck.JWTToAuthz(b, envoyTrusted(t)))
		})},
		{"client identity headers are removed before ext_authz", perFile(envoyFiles, func(t *testing.T, f string) error {
			var hs []string
			if h := envoyTrusted(t); h != "" {
				hs = append(hs, h)
			}
			return confcheck.IdentityHeadersStripped(r.bootstrap(t, f), hs)
		})},
		{"in Istio the trusted header comes from a verified token", func(t *testing.T) error {
			return confcheck.IstioIdentity(r.manifests(t, istioFiles...), kubeTrusted(t))
		}},
		{"a WasmPlugin reading identity runs after authentication and is pinned by digest", func(t *testing.T) error {
			return confcheck.WasmPluginsSafe(r.manifests(t, istioFiles...))
		}},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", func(t *testing.T) error {
			return errors.Join(
				perFile(kubeFiles, func(t *testing.T, f string) error { return confcheck.AdminClosed(r.manifests(t, f)) })(t),
				confcheck.ComposeAdminClosed(compose(t)),
				confcheck.DockerfileAdminClosed(r.envoy(t, "Dockerfile")),
			)
		}},
		{"no manifest writes the demo data", perFile(kubeFiles, func(t *testing.T, f string) error {
			return confcheck.NoDemoData(r.manifests(t, f))
		})},
		{"one replica keeps its store on a persistent volume", perFile(kubeFiles, func(t *testing.T, f string) error {
			return confcheck.OneStore(r.manifests(t, f))
		})},
		{"the nexus image runs `nexus run` from a directory its user can write", func(t *testing.T) error {
			return confcheck.DockerfileWritableWorkdir(r.envoy(t, "Dockerfile"), "nexus")
		}},
		{"the Envoy images meet the edge filter's version", func(t *testing.T) error {
			_, rec, err := confcheck.PluginEnvoyVersions(r.read(t, pluginReadme))
			if err != nil {
				return err
			}
			stages, err := confcheck.DockerfileStages(r.envoy(t, "Dockerfile"))
			if err != nil {
				return err
			}
			var images []string
			for _, st := range stages {
				images = append(images, st.From)
			}
			for _, s := range compose(t).Services {
				images = append(images, s.Image)
			}
			return confcheck.EnvoyImagesAtLeast(images, rec, "the release plugin/README.md recommends: earlier ones can end the Go-built edge filter with poll_oneoff failed")
		}},
		{"nginx, Caddy and HAProxy pass nexus only the user they verified", func(t *testing.T) error {
			var errs []error
			for _, kind := range proxy.Kinds {
				files, err := proxy.Render(proxy.Config{Kind: kind, Nexus: "127.0.0.1:8181", Upstream: "127.0.0.1:8080", Users: []string{"alice"}, UpstreamHeaders: []string{"X-Nexus-Decision"}}, "127.0.0.1:8000", t.TempDir())
				if err != nil {
					return err
				}
				conf := map[proxy.Kind]string{proxy.Nginx: "nginx.conf", proxy.Caddy: "Caddyfile", proxy.HAProxy: "haproxy.cfg"}[kind]
				if err := confcheck.ProxyIdentity(string(kind), files[conf], "X-User"); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}},
	}
}

// TestDeployRules checks what the deployment files mean: each rule is a
// way a file that passes every schema would still fail or open a hole.
func TestDeployRules(t *testing.T) {
	for _, r := range deployRules(realRepo) {
		t.Run(r.name, func(t *testing.T) {
			if err := r.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeployRulesRejectRegressions puts each defect the rules exist for
// back into a copy of the fixed files, one at a time, and requires the rule
// to fail.
func TestDeployRulesRejectRegressions(t *testing.T) {
	rules := map[string]deployRule{}
	for _, r := range deployRules(realRepo) {
		rules[r.name] = r
	}
	tests := []struct {
		rule, file, old, new string
	}{
		{"an HTTP authorization service receives every header the policy reads", "envoy/envoy-ext-authz-http.yaml", "                - exact: x-user\n", ""},
		{"an HTTP authorization service receives every header the policy reads", "envoy/istio/istiod-values.yaml", "      - x-user\n", "      - x-nexus-subject\n"},
		{"every Envoy file verifies a JWT and ext_authz gets what jwt_authn verified", "envoy/envoy-ext-authz-grpc.yaml", "              metadata_context_namespaces: [envoy.filters.http.jwt_authn]\n", ""},
		{"every Envoy file verifies a JWT and ext_authz gets what jwt_authn verified", "envoy/envoy-wasm.yaml", "                  payload_in_metadata: jwt_payload\n", ""},
		{"every Envoy file verifies a JWT and ext_authz gets what jwt_authn verified", "envoy/envoy-ext-authz-http.yaml", "claim_name: sub }", "claim_name: email }"},
		{"client identity headers are removed before ext_authz", "envoy/envoy-ext-authz-grpc.yaml", "              - remove: x-user\n", "              - remove: x-users\n"},
		{"client identity headers are removed before ext_authz", "envoy/envoy-wasm.yaml", "              - remove: x-user\n", ""},
		{"in Istio the trusted header comes from a verified token", "envoy/istio/authorization-policy.yaml", "    - header: x-user\n", "    - header: x-jwt-sub\n"},
		{"a WasmPlugin reading identity runs after authentication and is pinned by digest", "envoy/istio/wasm-plugin.yaml", "phase: AUTHZ", "phase: AUTHN"},
		{"a WasmPlugin reading identity runs after authentication and is pinned by digest", "envoy/istio/wasm-plugin.yaml", "  sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"\n", ""},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", "envoy/kubernetes/nexus.yaml", "    targetPort: http\n    appProtocol: http\n---", "    targetPort: http\n    appProtocol: http\n  - name: http-admin\n    port: 8282\n    targetPort: admin\n---"},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", "envoy/kubernetes/nexus.yaml", "  - from:\n    - namespaceSelector:\n        matchLabels:\n          kubernetes.io/metadata.name: apps\n      podSelector:\n        matchLabels:\n          app: my-app\n    ports:", "  - ports:"},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", "envoy/kubernetes/sidecar.yaml", "        - --admin-token-file=/var/run/secrets/nexus/token\n", ""},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", "envoy/kubernetes/nexus.yaml", "        - --admin-token-file=/var/run/secrets/nexus/token\n", "        - --admin-token=s3cret\n"},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", "envoy/docker-compose.yaml", "    - --admin-token-file=/run/secrets/nexus-admin-token\n", ""},
		{"no Service publishes the admin port and every admin listener outside loopback has a token from a Secret", "envoy/Dockerfile", `"--http-addr=0.0.0.0:8181", "--data-dir`, `"--http-addr=0.0.0.0:8181", "--admin-addr=0.0.0.0:8282", "--data-dir`},
		{"no manifest writes the demo data", "envoy/kubernetes/nexus.yaml", "        - --schema=/etc/nexus/schema.yaml\n", ""},
		{"one replica keeps its store on a persistent volume", "envoy/kubernetes/nexus.yaml", "  replicas: 1\n", "  replicas: 2\n"},
		{"one replica keeps its store on a persistent volume", "envoy/kubernetes/sidecar.yaml", "        persistentVolumeClaim:\n          claimName: my-app-nexus-data\n", "        emptyDir: {}\n"},
		{"one replica keeps its store on a persistent volume", "envoy/kubernetes/sidecar.yaml", "  strategy:\n    type: Recreate\n", ""},
		{"the nexus image runs `nexus run` from a directory its user can write", "envoy/Dockerfile", "WORKDIR /var/lib/nexus\n", ""},
		{"the nexus image runs `nexus run` from a directory its user can write", "envoy/Dockerfile", "WORKDIR /var/lib/nexus\n", "WORKDIR /tmp\n"},
		{"the nexus image runs `nexus run` from a directory its user can write", "envoy/Dockerfile", "--chown=65532:65532 /out/data", "--chown=0:0 /out/data"},
		{"the Envoy images meet the edge filter's version", "envoy/Dockerfile", "envoyproxy/envoy:v1.39-latest", "envoyproxy/envoy:v1.36-latest"},
		{"the Envoy images meet the edge filter's version", "envoy/docker-compose.yaml", "envoyproxy/envoy:v1.39-latest", "envoyproxy/envoy:v1.36-latest"},
	}
	for _, tt := range tests {
		t.Run(tt.rule+": "+tt.file, func(t *testing.T) {
			r, ok := rules[tt.rule]
			if !ok {
				t.Fatalf("no rule %q", tt.rule)
			}
			root := copyRuleFiles(t)
			p := filepath.Join(string(root), tt.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tt.old) {
				t.Fatalf("%q is not in %s", tt.old, tt.file)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(b), tt.old, tt.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, rr := range deployRules(root) {
				if rr.name != r.name {
					continue
				}
				err := rr.check(t)
				if err == nil {
					t.Fatal("accepted")
				}
				t.Logf("rejected: %v", err)
			}
		})
	}
}

// copyRuleFiles copies the files the rules read into a temporary root.
func copyRuleFiles(t *testing.T) repo {
	t.Helper()
	root := t.TempDir()
	for _, rel := range ruleFiles {
		src := filepath.Join(string(realRepo), rel)
		dst := filepath.Join(root, rel)
		st, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		if st.IsDir() {
			if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo(root)
}

// demoTokens reads envoy/demo-tokens: user to compact JWT.
func demoTokens(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(string(readFile(t, "demo-tokens")), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, tok, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("demo-tokens: bad line %q", line)
		}
		out[user] = tok
	}
	return out
}

// TestDemoCredentials checks that the demo works as shipped: every demo
// token verifies against the key, issuer and audience of every Envoy
// file's jwt_authn provider and names its user in sub, and the edge
// filter's configuration holds the admin token nexus reads in the compose
// file.
func TestDemoCredentials(t *testing.T) {
	tokens := demoTokens(t)
	for _, u := range []string{"alice", "bob", "carol"} {
		if tokens[u] == "" {
			t.Fatalf("demo-tokens: no token for %s", u)
		}
	}
	for _, f := range envoyFiles {
		provs, err := confcheck.JWTProviders(realRepo.bootstrap(t, f))
		if err != nil {
			t.Fatal(err)
		}
		if len(provs) == 0 {
			t.Fatalf("%s: no jwt_authn provider", f)
		}
		for _, p := range provs {
			for user, tok := range tokens {
				claims, err := p.Verify(tok, time.Now())
				if err != nil {
					t.Fatalf("%s: %s's token: %v", f, user, err)
				}
				if claims["sub"] != user {
					t.Fatalf("%s: %s's token has sub %v", f, user, claims["sub"])
				}
			}
			// A token whose signature does not match fails.
			tok := tokens["alice"]
			bad := tok[:len(tok)-4] + "AAAA"
			if _, err := p.Verify(bad, time.Now()); err == nil {
				t.Fatalf("%s: a token with a broken signature verifies", f)
			}
		}
	}
	admin := strings.TrimSpace(string(readFile(t, "demo-admin-token")))
	if got, _ := pluginConfig(t)["token"].(string); got != admin {
		t.Fatalf("plugin-config.json token %q, want the compose file's admin token %q (demo-admin-token)", got, admin)
	}
}
