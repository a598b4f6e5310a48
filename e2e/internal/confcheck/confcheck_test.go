package confcheck

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// minimal is a valid bootstrap with one HTTP filter chain, used as the base
// of the Envoy cases; each case changes one line of it.
const minimal = `
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
          route_config:
            virtual_hosts:
            - name: v
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: up }
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    disabled: true
          http_filters:
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              grpc_service: { envoy_grpc: { cluster_name: up }, timeout: 0.25s }
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

func TestEnvoyBootstrap(t *testing.T) {
	tests := []struct {
		name    string
		old     string // replaced in minimal by new
		new     string
		wantErr error // nil: valid
	}{
		{name: "valid"},
		{name: "unknown field at the top", old: "static_resources:", new: "node: { idd: x }\nstatic_resources:", wantErr: ErrUnknownField},
		{name: "unknown field inside an Any", old: "stat_prefix: s", new: "stat_prefix: s\n          stat_prefixx: s", wantErr: ErrUnknownField},
		{name: "unknown field two Anys deep", old: "disabled: true", new: "disabledd: true", wantErr: ErrUnknownField},
		{name: "unresolvable Any type", old: "router.v3.Router", new: "router.v3.Routerr", wantErr: ErrInvalid},
		{name: "rule broken inside an Any", old: "stat_prefix: s", new: "stat_prefix: \"\"", wantErr: ErrInvalid},
		{name: "rule broken in bootstrap", old: "port_value: 9191", new: "port_value: 70000", wantErr: ErrInvalid},
		{name: "deprecated field", old: "    type: STATIC", new: "    type: STATIC\n    http2_protocol_options: {}", wantErr: ErrInvalid},
		{name: "undefined cluster in a route", old: "route: { cluster: up }", new: "route: { cluster: down }", wantErr: ErrReference},
		{name: "undefined cluster in a gRPC service", old: "cluster_name: up }", new: "cluster_name: nexus }", wantErr: ErrReference},
		{name: "per-filter config for no filter", old: "                  envoy.filters.http.ext_authz:", new: "                  envoy.filters.http.extauthz:", wantErr: ErrReference},
		{name: "duplicate key", old: "stat_prefix: s", new: "stat_prefix: s\n          stat_prefix: t", wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := minimal
			if tt.old != "" {
				if !strings.Contains(in, tt.old) {
					t.Fatalf("case does not apply: %q not in the base", tt.old)
				}
				in = strings.Replace(in, tt.old, tt.new, 1)
			}
			_, err := EnvoyBootstrap([]byte(in))
			t.Logf("error: %v", err)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func istioCRDsForTest(t *testing.T) *CRDs {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api").Output()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "kubernetes", "customresourcedefinitions.gen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCRDs(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestManifests(t *testing.T) {
	crds := istioCRDsForTest(t)
	const policy = `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: { name: p, namespace: ns }
spec:
  action: CUSTOM
  provider: { name: nexus }
  rules:
  - to: [ { operation: { paths: ["/x"] } } ]
`
	const entry = `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: { name: e, namespace: ns }
spec:
  hosts: [a.local]
  ports: [ { name: grpc, number: 9191, protocol: GRPC } ]
  resolution: DNS
`
	const deploy = `apiVersion: apps/v1
kind: Deployment
metadata: { name: d, namespace: ns }
spec:
  selector: { matchLabels: { app: a } }
  template:
    metadata: { labels: { app: a } }
    spec:
      containers:
      - name: nexus
        image: i
        ports: [ { name: admin, containerPort: 8282 } ]
        resources: { requests: { cpu: 1, memory: 1Mi }, limits: { memory: 1Mi } }
        readinessProbe: { httpGet: { path: /readyz, port: admin } }
        livenessProbe: { httpGet: { path: /healthz, port: admin } }
---
apiVersion: v1
kind: Service
metadata: { name: s, namespace: ns }
spec:
  selector: { app: a }
  ports: [ { name: http-admin, port: 8282, targetPort: admin } ]
`
	tests := []struct {
		name    string
		in      string
		wantErr error
	}{
		{name: "valid policy", in: policy},
		{name: "valid service entry", in: entry},
		{name: "valid deployment and service", in: deploy},
		{name: "unknown spec field (CRD schema)", in: strings.Replace(policy, "action:", "actionn: CUSTOM\n  action:", 1), wantErr: ErrUnknownField},
		{name: "enum value outside the schema", in: strings.Replace(policy, "action: CUSTOM", "action: CUSTOMM", 1), wantErr: ErrInvalid},
		{name: "CEL rule of the CRD", in: strings.Replace(policy, "  rules:", "  selector: { matchLabels: { a: b } }\n  targetRef: { kind: Gateway, group: gateway.networking.k8s.io, name: g }\n  rules:", 1), wantErr: ErrInvalid},
		{name: "CEL rule with integers", in: strings.Replace(entry, "number: 9191", "number: 70000", 1), wantErr: ErrInvalid},
		{name: "unknown metadata field", in: strings.Replace(policy, "namespace: ns", "namespace: ns, labelz: {}", 1), wantErr: ErrUnknownField},
		{name: "wrong case in a Kubernetes field", in: strings.Replace(deploy, "image: i", "Image: i", 1), wantErr: ErrUnknownField},
		{name: "selector does not match the pods", in: strings.Replace(deploy, "matchLabels: { app: a }", "matchLabels: { app: b }", 1), wantErr: ErrInvalid},
		{name: "probe on an undeclared port", in: strings.Replace(deploy, "path: /readyz, port: admin", "path: /readyz, port: admn", 1), wantErr: ErrReference},
		{name: "service selects nothing", in: strings.Replace(deploy, "selector: { app: a }", "selector: { app: z }", 1), wantErr: ErrReference},
		{name: "non-standard resource name", in: strings.Replace(deploy, "limits: { memory: 1Mi }", "limits: { memory: 1Mi, gpu: 1 }", 1), wantErr: ErrInvalid},
		{name: "name that is no DNS subdomain", in: strings.Replace(policy, "name: p,", "name: P_1,", 1), wantErr: ErrInvalid},
		{name: "label value too long", in: strings.Replace(deploy, "metadata: { name: d, namespace: ns }", "metadata: { name: d, namespace: ns, labels: { a: "+strings.Repeat("x", 64)+" } }", 1), wantErr: ErrInvalid},
		{name: "no namespace", in: strings.Replace(entry, ", namespace: ns", "", 1), wantErr: ErrInvalid},
		{name: "kind nobody knows", in: strings.Replace(policy, "kind: AuthorizationPolicy", "kind: AuthorisationPolicy", 1), wantErr: ErrReference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Manifests(context.Background(), []byte(tt.in), crds)
			t.Logf("error: %v", err)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestIstiodMeshValues(t *testing.T) {
	const valid = `meshConfig:
  extensionProviders:
  - name: nexus
    envoyExtAuthzGrpc: { service: nexus.ns.svc.cluster.local, port: 9191, timeout: 0.25s }
`
	tests := []struct {
		name    string
		in      string
		wantErr error
	}{
		{name: "valid", in: valid},
		{name: "unknown provider field", in: strings.Replace(valid, "port: 9191", "prot: 9191", 1), wantErr: ErrUnknownField},
		{name: "other top-level key", in: valid + "global: {}\n", wantErr: ErrUnknownField},
		{name: "missing port", in: strings.Replace(valid, "port: 9191, ", "", 1), wantErr: ErrInvalid},
		{name: "repeated name", in: valid + "  - name: nexus\n    envoyExtAuthzGrpc: { service: s, port: 1 }\n", wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := IstiodMeshValues([]byte(tt.in))
			t.Logf("error: %v", err)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestComposeFile(t *testing.T) {
	const valid = `services:
  up:
    image: u
  px:
    image: p
    command: ["envoy", "-c", "/etc/envoy/${CFG:-e.yaml}"]
    volumes: ["./e.yaml:/etc/envoy/e.yaml:ro", "data:/data"]
    ports: ["127.0.0.1:10000:10000"]
    depends_on: [up]
  b:
    build: { context: ., dockerfile: Dockerfile, target: t }
volumes:
  data: {}
`
	tests := []struct {
		name    string
		in      string
		wantErr error
	}{
		{name: "valid", in: valid},
		{name: "unknown field", in: strings.Replace(valid, "    image: u", "    imag: u", 1), wantErr: ErrUnknownField},
		{name: "missing mount source", in: strings.Replace(valid, "./e.yaml:", "./f.yaml:", 1), wantErr: ErrReference},
		{name: "config not mounted", in: strings.Replace(valid, "${CFG:-e.yaml}", "${CFG:-g.yaml}", 1), wantErr: ErrReference},
		{name: "variable without default", in: strings.Replace(valid, "${CFG:-e.yaml}", "${CFG}", 1), wantErr: ErrReference},
		{name: "undeclared named volume", in: strings.Replace(valid, "data:/data", "store:/data", 1), wantErr: ErrReference},
		{name: "unknown dependency", in: strings.Replace(valid, "depends_on: [up]", "depends_on: [down]", 1), wantErr: ErrReference},
		{name: "unknown build target", in: strings.Replace(valid, "target: t", "target: x", 1), wantErr: ErrReference},
		{name: "port published on every address", in: strings.Replace(valid, "127.0.0.1:10000:10000", "0.0.0.0:10000:10000", 1), wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range map[string]string{"compose.yaml": tt.in, "e.yaml": "{}", "Dockerfile": "FROM scratch AS t\n"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ComposeFile(filepath.Join(dir, "compose.yaml"))
			t.Logf("error: %v", err)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestKeyTypos(t *testing.T) {
	in := "a: 1\nb:\n  c: [ {d: 2} ]\n---\ne: 3\n"
	typos, err := KeyTypos([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, ty := range typos[1:] {
		paths = append(paths, ty.Path)
	}
	if got, want := strings.Join(paths, " "), "doc1:a doc1:b doc1:b.c doc1:b.c[0].d doc2:e"; got != want {
		t.Fatalf("paths %q, want %q", got, want)
	}
	if !strings.Contains(string(typos[4].Data), "dx: 2") || strings.Contains(string(typos[4].Data), "ax:") {
		t.Fatalf("typo of d:\n%s", typos[4].Data)
	}
}
