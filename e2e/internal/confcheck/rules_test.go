package confcheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/e2e/internal/proxy"
)

// identity is a bootstrap that verifies JWTs and checks requests over gRPC
// and HTTP ext_authz, with every identity rule met; each case breaks one.
const identity = `
static_resources:
  listeners:
  - name: l
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - filters:
      - name: hcm
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: s
          early_header_mutation_extensions:
          - name: envoy.http.early_header_mutation.header_mutation
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation
              mutations:
              - remove: x-user
          route_config:
            virtual_hosts:
            - name: v
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: up }
          http_filters:
          - name: envoy.filters.http.jwt_authn
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
              providers:
                p:
                  issuer: i
                  local_jwks: { inline_string: '{"keys":[]}' }
                  payload_in_metadata: jwt_payload
                  claim_to_headers: [ { header_name: x-user, claim_name: sub } ]
              rules:
              - match: { prefix: / }
                requires: { requires_any: { requirements: [ { provider_name: p }, { allow_missing: {} } ] } }
          - name: grpc_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              metadata_context_namespaces: [envoy.filters.http.jwt_authn]
              grpc_service: { envoy_grpc: { cluster_name: up }, timeout: 0.25s }
          - name: http_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              http_service:
                server_uri: { uri: "http://up", cluster: up, timeout: 0.25s }
              allowed_headers:
                patterns: [ { exact: x-user }, { prefix: x-ten } ]
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: up
    type: STATIC
    load_assignment:
      cluster_name: up
      endpoints:
      - lb_endpoints:
        - endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 9191 } } }
`

func TestEnvoyIdentityRules(t *testing.T) {
	rules := func(in string) error {
		b, err := EnvoyBootstrap([]byte(in))
		if err != nil {
			return err
		}
		return errors.Join(
			AuthzHeaders(b, []string{"x-user", "x-tenant"}),
			RequireJWT(b),
			JWTToAuthz(b, "x-user"),
			IdentityHeadersStripped(b, []string{"x-user"}),
		)
	}
	tests := []struct {
		name     string
		old, new string
		want     string // substring of the error; "" means valid
	}{
		{name: "valid"},
		{name: "HTTP service misses a header", old: "{ prefix: x-ten }", new: "{ prefix: x-tenants }", want: "does not send the x-tenant header"},
		{name: "header disallowed", old: "              allowed_headers:", new: "              disallowed_headers: { patterns: [ { exact: x-user } ] }\n              allowed_headers:", want: "does not send the x-user header"},
		{name: "no metadata for gRPC", old: "              metadata_context_namespaces: [envoy.filters.http.jwt_authn]\n", new: "", want: "metadata_context_namespaces"},
		{name: "no payload in metadata", old: "                  payload_in_metadata: jwt_payload\n", new: "", want: "payload_in_metadata"},
		{name: "sub not copied for HTTP", old: "claim_name: sub", new: "claim_name: email", want: "copies the sub claim"},
		{name: "ext_authz before jwt_authn", old: "          - name: envoy.filters.http.jwt_authn", new: "          - name: early_authz\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n              grpc_service: { envoy_grpc: { cluster_name: up }, timeout: 0.25s }\n          - name: envoy.filters.http.jwt_authn", want: "runs before jwt_authn"},
		{name: "no jwt_authn", old: identity[strings.Index(identity, "          - name: envoy.filters.http.jwt_authn\n"):strings.Index(identity, "          - name: grpc_authz\n")], new: "", want: "no jwt_authn filter"},
		{name: "identity header not removed", old: "              - remove: x-user", new: "              - remove: x-other", want: "client's own x-user"},
		// Moved into a header_mutation filter ahead of the others (below).
		{name: "removed by a header_mutation filter first", old: "              - remove: x-user", new: "              - remove: x-other", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := identity
			if tt.old != "" {
				if !strings.Contains(in, tt.old) {
					t.Fatalf("case does not apply: %q", tt.old)
				}
				in = strings.Replace(in, tt.old, tt.new, 1)
			}
			if tt.name == "removed by a header_mutation filter first" {
				in = strings.Replace(in, "          http_filters:\n", "          http_filters:\n          - name: strip\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation\n              mutations: { request_mutations: [ { remove: x-user } ] }\n", 1)
			}
			err := rules(in)
			t.Logf("error: %v", err)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			case tt.want != "" && !errors.Is(err, ErrUnsafe):
				t.Fatalf("error %v is not ErrUnsafe", err)
			}
		})
	}
}

func TestJWTProviderReferences(t *testing.T) {
	in := strings.Replace(identity, "{ provider_name: p }", "{ provider_name: q }", 1)
	if _, err := EnvoyBootstrap([]byte(in)); !errors.Is(err, ErrReference) {
		t.Fatalf("a requirement naming an undefined provider: %v, want ErrReference", err)
	}
}

const istioFiles = `apiVersion: security.istio.io/v1
kind: RequestAuthentication
metadata: { name: jwt, namespace: apps }
spec:
  selector: { matchLabels: { app: a } }
  jwtRules:
  - issuer: https://idp.example.com
    jwksUri: https://idp.example.com/jwks
    outputClaimToHeaders: [ { header: x-user, claim: sub } ]
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: p, namespace: apps }
spec:
  selector: { matchLabels: { app: a, tier: web } }
  action: CUSTOM
  provider: { name: nexus }
  rules: [ { to: [ { operation: { paths: ["/x"] } } ] } ]
---
apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: { name: edge, namespace: apps }
spec:
  selector: { matchLabels: { app: a } }
  url: oci://r.example.com/p:v1
  sha256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
  phase: AUTHZ
  pluginConfig: { subject: { header: x-user } }
`

func TestIstioRules(t *testing.T) {
	crds := istioCRDsForTest(t)
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{name: "valid"},
		{name: "claim to another header", old: "header: x-user, claim: sub", new: "header: x-sub, claim: sub", want: "reads the subject from x-user"},
		{name: "another claim", old: "header: x-user, claim: sub", new: "header: x-user, claim: email", want: "reads the subject from x-user"},
		{name: "authentication of other workloads", old: "selector: { matchLabels: { app: a } }\n  jwtRules", new: "selector: { matchLabels: { app: b } }\n  jwtRules", want: "AuthorizationPolicy p"},
		{name: "authentication in another namespace", old: "metadata: { name: jwt, namespace: apps }", new: "metadata: { name: jwt, namespace: web }", want: "WasmPlugin edge"},
		{name: "mesh-wide authentication", old: "metadata: { name: jwt, namespace: apps }\nspec:\n  selector: { matchLabels: { app: a } }\n", new: "metadata: { name: jwt, namespace: istio-system }\nspec:\n"},
		{name: "plugin before authentication", old: "phase: AUTHZ", new: "phase: AUTHN", want: "phase AUTHN"},
		{name: "plugin not pinned", old: "  sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n", new: "", want: "not pinned"},
		{name: "plugin pinned in the url", old: "  url: oci://r.example.com/p:v1\n  sha256: \"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n", new: "  url: oci://r.example.com/p@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"},
		{name: "digest that is no digest", old: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", new: "latest", want: "should match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := istioFiles
			if tt.old != "" {
				if !strings.Contains(in, tt.old) {
					t.Fatalf("case does not apply: %q", tt.old)
				}
				in = strings.Replace(in, tt.old, tt.new, 1)
			}
			objs, err := Manifests(context.Background(), []byte(in), crds)
			if err == nil {
				err = errors.Join(IstioIdentity(objs, "x-user"), WasmPluginsSafe(objs))
			}
			t.Logf("error: %v", err)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

const kubeFiles = `apiVersion: apps/v1
kind: StatefulSet
metadata: { name: nexus, namespace: ns }
spec:
  replicas: 1
  serviceName: nexus
  selector: { matchLabels: { app: nexus } }
  template:
    metadata: { labels: { app: nexus } }
    spec:
      containers:
      - name: nexus
        image: i
        args: [serve, --http-addr=0.0.0.0:8181, --admin-addr=0.0.0.0:8282, --admin-token-file=/run/secrets/nexus/token, --data-dir=/var/lib/nexus, --schema=/etc/nexus/schema.yaml, --policy=/etc/nexus/policy.tar.gz]
        ports: [ { name: http, containerPort: 8181 }, { name: admin, containerPort: 8282 } ]
        resources: { requests: { cpu: 1, memory: 1Mi }, limits: { memory: 1Mi } }
        readinessProbe: { httpGet: { path: /readyz, port: http } }
        livenessProbe: { httpGet: { path: /healthz, port: http } }
        volumeMounts: [ { name: data, mountPath: /var/lib/nexus }, { name: token, mountPath: /run/secrets/nexus } ]
      volumes:
      - name: token
        secret: { secretName: nexus-admin-token, optional: false }
  volumeClaimTemplates:
  - metadata: { name: data }
    spec: { accessModes: [ReadWriteOnce], resources: { requests: { storage: 1Gi } } }
---
apiVersion: v1
kind: Service
metadata: { name: nexus, namespace: ns }
spec:
  selector: { app: nexus }
  ports: [ { name: http, port: 8181, targetPort: http } ]
---
apiVersion: v1
kind: Service
metadata: { name: nexus-admin, namespace: ns }
spec:
  selector: { app: nexus }
  ports: [ { name: http-admin, port: 8282, targetPort: admin } ]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: nexus, namespace: ns }
spec:
  podSelector: { matchLabels: { app: nexus } }
  policyTypes: [Ingress]
  ingress:
  - ports: [ { port: 8181 } ]
  - from: [ { podSelector: { matchLabels: { app: edge } } } ]
    ports: [ { port: 8282 } ]
`

func TestKubernetesRules(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{name: "valid"},
		{name: "admin on loopback needs no token", old: "--admin-addr=0.0.0.0:8282, --admin-token-file=/run/secrets/nexus/token", new: "--admin-addr=127.0.0.1:8282"},
		{name: "default admin address needs no token", old: "--admin-addr=0.0.0.0:8282, --admin-token-file=/run/secrets/nexus/token, ", new: ""},
		{name: "token from a secretKeyRef", old: "--admin-token-file=/run/secrets/nexus/token, ", new: "", want: ""},
		{name: "no token", old: "--admin-token-file=/run/secrets/nexus/token, ", new: "--admin-token-file=/var/lib/nexus/token, ", want: "is not in a mounted Secret"},
		{name: "literal token", old: "--admin-token-file=/run/secrets/nexus/token", new: "--admin-token=s3cret", want: "--admin-token puts the token in the manifest"},
		{name: "admin next to the decision port", old: "ports: [ { name: http, port: 8181, targetPort: http } ]", new: "ports: [ { name: http, port: 8181, targetPort: http }, { name: a, port: 8282, targetPort: 8282 } ]", want: "next to the decision ports"},
		{name: "admin open to everyone", old: "  - from: [ { podSelector: { matchLabels: { app: edge } } } ]\n    ports: [ { port: 8282 } ]", new: "  - ports: [ { port: 8282 } ]", want: "no NetworkPolicy limits"},
		{name: "admin open to every namespace", old: "from: [ { podSelector: { matchLabels: { app: edge } } } ]", new: "from: [ { namespaceSelector: {} } ]", want: "no NetworkPolicy limits"},
		{name: "policy without ingress", old: "policyTypes: [Ingress]", new: "policyTypes: [Egress]", want: "no NetworkPolicy limits"},
		{name: "demo data", old: "--schema=/etc/nexus/schema.yaml, ", new: "", want: "no --schema"},
		{name: "two replicas", old: "replicas: 1", new: "replicas: 2", want: "2 replicas"},
		{name: "store in the pod", old: "{ name: data, mountPath: /var/lib/nexus }", new: "{ name: token, mountPath: /var/lib/nexus }", want: "not on a PersistentVolumeClaim"},
		{name: "claim without storage", old: "requests: { storage: 1Gi }", new: "requests: { storag: 1Gi }", want: "storage request"},
		{name: "policy selecting nothing", old: "podSelector: { matchLabels: { app: nexus } }", new: "podSelector: { matchLabels: { app: nexux } }", want: "selects no pod"},
	}
	crds := istioCRDsForTest(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := kubeFiles
			if tt.old != "" {
				if !strings.Contains(in, tt.old) {
					t.Fatalf("case does not apply: %q", tt.old)
				}
				in = strings.Replace(in, tt.old, tt.new, 1)
			}
			if tt.name == "token from a secretKeyRef" {
				in = strings.Replace(in, "        volumeMounts:", "        env: [ { name: NEXUS_ADMIN_TOKEN, valueFrom: { secretKeyRef: { name: t, key: token } } } ]\n        volumeMounts:", 1)
			}
			objs, err := Manifests(context.Background(), []byte(in), crds)
			if err == nil {
				err = errors.Join(AdminClosed(objs), NoDemoData(objs), OneStore(objs))
			}
			t.Logf("error: %v", err)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestComposeAndDockerfileAdmin(t *testing.T) {
	const dockerfile = "FROM golang:1.26 AS build\nFROM scratch AS nexus\nENTRYPOINT [\"/nexus\"]\nCMD [\"serve\", \"--grpc-addr=0.0.0.0:9191\", \\\n  \"--admin-addr=0.0.0.0:8282\"]\nFROM envoyproxy/envoy:v1.39-latest AS envoy\n"
	if err := DockerfileAdminClosed([]byte(dockerfile)); err == nil || !strings.Contains(err.Error(), "0.0.0.0:8282 without a token") {
		t.Fatalf("an open admin CMD: %v", err)
	}
	if err := DockerfileAdminClosed([]byte(strings.Replace(dockerfile, `"--admin-addr=0.0.0.0:8282"`, `"--http-addr=0.0.0.0:8181"`, 1))); err != nil {
		t.Fatalf("admin on the default loopback address: %v", err)
	}
	const compose = `services:
  nexus:
    build: { context: ., dockerfile: Dockerfile, target: nexus }
    command: [serve, --admin-addr=0.0.0.0:8282, --admin-token-file=/run/secrets/admin]
    secrets: [admin]
secrets:
  admin: { file: ./token }
`
	tests := []struct {
		name, old, new, want string
	}{
		{name: "token from a secret"},
		{name: "secret not listed", old: "    secrets: [admin]\n", new: "", want: "no token from a Compose secret"},
		{name: "literal token", old: "--admin-token-file=/run/secrets/admin", new: "--admin-token=t", want: "--admin-token puts the token"},
		{name: "image command", old: "    command: [serve, --admin-addr=0.0.0.0:8282, --admin-token-file=/run/secrets/admin]\n", new: "", want: "no token from a Compose secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := strings.Replace(compose, tt.old, tt.new, 1)
			for name, body := range map[string]string{"compose.yaml": in, "Dockerfile": dockerfile, "token": "t\n"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := ComposeFile(filepath.Join(dir, "compose.yaml"))
			if err == nil {
				err = ComposeAdminClosed(c)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestEnvoyImageVersions(t *testing.T) {
	readme := []byte("- **Minimum: Envoy 1.33** (...)\n- **Recommended: Envoy 1.39 or later**, which ...")
	minimum, rec, err := PluginEnvoyVersions(readme)
	if err != nil || minimum != (Version{1, 33}) || rec != (Version{1, 39}) {
		t.Fatalf("PluginEnvoyVersions: %v %v %v", minimum, rec, err)
	}
	tests := []struct {
		image string
		want  string // "" means accepted
	}{
		{image: "envoyproxy/envoy:v1.39-latest"},
		{image: "envoyproxy/envoy:v1.40.1"},
		{image: "docker.io/envoyproxy/envoy:distroless-v1.39.2"},
		{image: "envoyproxy/envoy:v2.0-latest"},
		{image: "golang:1.26"},
		{image: "envoyproxy/envoy:v1.36-latest", want: "older than 1.39"},
		{image: "envoyproxy/envoy:dev", want: "names no release"},
	}
	for _, tt := range tests {
		err := EnvoyImagesAtLeast([]string{tt.image}, rec, "test")
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.image, err, tt.want)
		}
	}
}

func TestServeFlagsAndLoopback(t *testing.T) {
	flags, ok := ServeFlags([]string{"/usr/local/bin/nexus", "serve", "--admin-addr", "0.0.0.0:8282", "--schema=/s.yaml", "--pprof"})
	if !ok || flags["admin-addr"] != "0.0.0.0:8282" || flags["schema"] != "/s.yaml" {
		t.Fatalf("flags %v %v", flags, ok)
	}
	if _, ok := flags["pprof"]; !ok {
		t.Fatal("a flag without value is lost")
	}
	if _, ok := ServeFlags([]string{"nexus", "compile"}); ok {
		t.Fatal("compile taken for serve")
	}
	for addr, want := range map[string]bool{"127.0.0.1:8282": true, "[::1]:1": true, "localhost:1": true, "-": true, "0.0.0.0:8282": false, ":8282": false, "[::]:1": false, "10.0.0.1:1": false} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v", addr, got)
		}
	}
}

// TestProxyIdentity renders the nginx, Caddy and HAProxy configurations of
// e2e/internal/proxy and breaks the identity rule in each, one way at a
// time.
func TestProxyIdentity(t *testing.T) {
	tests := []struct {
		kind     proxy.Kind
		file     string
		old, new string
		want     string
	}{
		{kind: proxy.Nginx, file: "nginx.conf"},
		{kind: proxy.Nginx, file: "nginx.conf", old: "            # The subject nexus trusts: the user auth_basic verified. The\n            # password stays here.\n            proxy_set_header X-User $remote_user;\n", new: "", want: "location = /_nexus_auth: the client's X-User goes through"},
		{kind: proxy.Nginx, file: "nginx.conf", old: "            proxy_set_header X-User $remote_user;\n            proxy_http_version", new: "            proxy_set_header X-User $http_x_user;\n            proxy_http_version", want: "not to the user nginx verified"},
		{kind: proxy.Nginx, file: "nginx.conf", old: "auth_basic \"nexus\";", new: "auth_basic off;", want: "auth_basic is off"},
		{kind: proxy.Caddy, file: "Caddyfile"},
		{kind: proxy.Caddy, file: "Caddyfile", old: "\t\tbasicauth bcrypt nexus {", new: "\t\tbasic_auth bcrypt nexus {"},
		{kind: proxy.Caddy, file: "Caddyfile", old: "\t\tbasicauth bcrypt nexus {", new: "\t\tbasicauthx bcrypt nexus {", want: "no basicauth before forward_auth"},
		{kind: proxy.Caddy, file: "Caddyfile", old: "\t\trequest_header X-User {http.auth.user.id}\n", new: "", want: "X-User is not set to the verified user"},
		{kind: proxy.Caddy, file: "Caddyfile", old: "\t\t\theader_up -Authorization\n", new: "\t\t\theader_up -Authorization\n\t\t\theader_up X-User {http.request.header.X-Forwarded-User}\n", want: "sets X-User to something else"},
		{kind: proxy.HAProxy, file: "haproxy.cfg"},
		{kind: proxy.HAProxy, file: "haproxy.cfg", old: "    http-request auth realm nexus unless { http_auth(nexus_users) }\n", new: "", want: "no http-request auth before the check"},
		{kind: proxy.HAProxy, file: "haproxy.cfg", old: "    http-request set-header X-User %[http_auth_user]\n", new: "", want: "X-User is not set to the verified user"},
		{kind: proxy.HAProxy, file: "haproxy.cfg", old: "    http-request lua.nexus_auth\n", new: "    http-request lua.nexus_auth\n    http-request set-header X-User %[req.hdr(x-forwarded-user)]\n", want: "sets X-User to something else"},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind)+" "+tt.want, func(t *testing.T) {
			files, err := proxy.Render(proxy.Config{Kind: tt.kind, Nexus: "127.0.0.1:8181", Upstream: "127.0.0.1:8080", Users: []string{"alice"}}, "127.0.0.1:8000", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			conf := string(files[tt.file])
			if tt.old != "" {
				if !strings.Contains(conf, tt.old) {
					t.Fatalf("case does not apply: %q not in\n%s", tt.old, conf)
				}
				conf = strings.Replace(conf, tt.old, tt.new, 1)
			}
			err = ProxyIdentity(string(tt.kind), []byte(conf), "X-User")
			t.Logf("error: %v", err)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
