package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	wasmcfgv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
	extensionsv1alpha1 "istio.io/api/extensions/v1alpha1"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	securityv1beta1 "istio.io/api/security/v1beta1"

	"github.com/nexuspdp/nexus/e2e/internal/confcheck"
)

// envoyDir is the folder of deployment files, relative to this package.
const envoyDir = "../envoy"

// nexus' default ports.
const (
	grpcPort  = 9191
	httpPort  = 8181
	adminPort = 8282
)

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(envoyDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	crdsOnce sync.Once
	crds     *confcheck.CRDs
	errCRDs  error
)

// istioCRDs loads the CRDs shipped in the istio.io/api module that this
// module requires (kubernetes/customresourcedefinitions.gen.yaml).
func istioCRDs(t *testing.T) *confcheck.CRDs {
	t.Helper()
	crdsOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/api").Output()
		if err != nil {
			errCRDs = fmt.Errorf("go list -m istio.io/api: %w", err)
			return
		}
		dir := strings.TrimSpace(string(out))
		data, err := os.ReadFile(filepath.Join(dir, "kubernetes", "customresourcedefinitions.gen.yaml"))
		if err != nil {
			errCRDs = err
			return
		}
		crds, errCRDs = confcheck.LoadCRDs(data)
	})
	if errCRDs != nil {
		t.Fatalf("istio CRDs: %v", errCRDs)
	}
	return crds
}

// edgeHeader and edgeValue are what the edge filter (plugin/internal/edge)
// sets on a request it allows; a client's own copy is removed.
const (
	edgeHeader = "x-nexus-decision"
	edgeValue  = "edge-allow"
)

// pluginConfig is envoy/plugin-config.json, the one source of the edge
// filter's configuration.
func pluginConfig(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readFile(t, "plugin-config.json"), &m); err != nil {
		t.Fatalf("plugin-config.json: %v", err)
	}
	for _, k := range []string{"pdp_cluster", "snapshot_path", "refresh_period_ms", "max_age_ms", "subject", "routes", "on_no_snapshot"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("plugin-config.json: %q missing", k)
		}
	}
	return m
}

// deployFile is one file under envoy/ with the validation that applies to
// it: its own, and its agreement with the other files.
type deployFile struct {
	name     string
	validate func(t *testing.T, data []byte) error
	// freeForm matches the key paths whose names are the user's to choose
	// (labels, service names), where a misspelling is still a valid file.
	freeForm *regexp.Regexp
}

// labelKey matches label keys (which may contain dots) in Istio files,
// whose selectors name workloads outside the file.
var labelKey = regexp.MustCompile(`(matchLabels|labels)\.`)

func deployFiles() []deployFile {
	manifests := func(extra func(t *testing.T, objs []confcheck.Object) error) func(t *testing.T, data []byte) error {
		return func(t *testing.T, data []byte) error {
			objs, err := confcheck.Manifests(context.Background(), data, istioCRDs(t))
			if err != nil {
				return err
			}
			if extra != nil {
				return extra(t, objs)
			}
			return nil
		}
	}
	return []deployFile{
		// context_extensions is a map the user fills for the policy.
		{name: "envoy-ext-authz-grpc.yaml", validate: checkEnvoy, freeForm: regexp.MustCompile(`context_extensions\.[^.]+$`)},
		{name: "envoy-ext-authz-http.yaml", validate: checkEnvoy},
		{name: "envoy-wasm.yaml", validate: checkEnvoy},
		{name: "istio/istiod-values.yaml", validate: checkMesh},
		{name: "istio/authorization-policy.yaml", validate: manifests(checkAuthzPolicies), freeForm: labelKey},
		{name: "istio/wasm-plugin.yaml", validate: manifests(checkWasmPlugin), freeForm: labelKey},
		// Object labels and pod labels no selector uses are free; selectors
		// and the pod labels they select must still match.
		// Peers a NetworkPolicy admits are named by labels of other
		// namespaces and workloads.
		{name: "kubernetes/nexus.yaml", validate: manifests(nil), freeForm: regexp.MustCompile(`^doc\d+:(metadata\.labels\.|spec\.template\.metadata\.labels\.app\.kubernetes\.io/component$|spec\.ingress\[\d+\]\.from\[\d+\]\.(namespaceSelector|podSelector)\.matchLabels\.)`)},
		{name: "kubernetes/sidecar.yaml", validate: manifests(nil), freeForm: regexp.MustCompile(`^doc\d+:metadata\.labels\.`)},
		{name: "kubernetes/nexus-cluster.yaml", validate: manifests(checkKubeCluster), freeForm: regexp.MustCompile(`^doc\d+:(metadata\.labels\.|spec\.template\.metadata\.labels\.app\.kubernetes\.io/component$|spec\.ingress\[\d+\]\.from\[\d+\]\.(namespaceSelector|podSelector)\.matchLabels\.)`)},
		{name: "kubernetes/nats-values.yaml", validate: func(t *testing.T, data []byte) error { _, err := confcheck.NATSHelmValues(data); return err }},
		// Service names nothing refers to are the user's choice.
		{name: "docker-compose.yaml", validate: checkCompose, freeForm: regexp.MustCompile(`^services\.(envoy|envoy-wasm)$`)},
		// The replicas' service names are the user's choice.
		{name: "docker-compose-cluster.yaml", validate: checkClusterCompose, freeForm: regexp.MustCompile(`^services\.nexus-\d$`)},
	}
}

// checkEnvoy validates a bootstrap file and what every nexus Envoy file must
// get right: ext_authz fails closed with a timeout on nexus' ports and path
// prefix; a Wasm filter comes before ext_authz, loads plugin.wasm as
// nexus_edge, carries plugin-config.json and names a cluster on the admin
// port.
func checkEnvoy(t *testing.T, data []byte) error {
	t.Helper()
	b, err := confcheck.EnvoyBootstrap(data)
	if err != nil {
		return err
	}
	ports := clusterPorts(b)
	var errs []error
	sawAuthz, sawWasm := false, false
	for _, m := range confcheck.EnvoyAnys(b) {
		switch v := m.(type) {
		case *extauthzv3.ExtAuthz:
			sawAuthz = true
			if v.GetFailureModeAllow() {
				errs = append(errs, errors.New("ext_authz: failure_mode_allow must be false"))
			}
			if g := v.GetGrpcService(); g != nil {
				if g.GetTimeout().AsDuration() <= 0 {
					errs = append(errs, errors.New("ext_authz grpc: a timeout is required"))
				}
				if p := ports[g.GetEnvoyGrpc().GetClusterName()]; p != grpcPort {
					errs = append(errs, fmt.Errorf("ext_authz grpc: cluster port %d, want %d", p, grpcPort))
				}
			}
			if h := v.GetHttpService(); h != nil {
				if h.GetPathPrefix() != "/ext_authz" {
					errs = append(errs, fmt.Errorf("ext_authz http: path_prefix %q, want /ext_authz", h.GetPathPrefix()))
				}
				if h.GetServerUri().GetTimeout().AsDuration() <= 0 {
					errs = append(errs, errors.New("ext_authz http: a timeout is required"))
				}
				if p := ports[h.GetServerUri().GetCluster()]; p != httpPort {
					errs = append(errs, fmt.Errorf("ext_authz http: cluster port %d, want %d", p, httpPort))
				}
			}
		case *wasmv3.Wasm:
			sawWasm = true
			if sawAuthz {
				errs = append(errs, errors.New("wasm: the edge filter must come before ext_authz"))
			}
			c := v.GetConfig()
			if c.GetRootId() != "nexus_edge" || !strings.HasSuffix(c.GetVmConfig().GetCode().GetLocal().GetFilename(), "/plugin.wasm") {
				errs = append(errs, errors.New("wasm: want root_id nexus_edge loading plugin.wasm"))
			}
			if c.GetFailurePolicy() != wasmcfgv3.FailurePolicy_FAIL_CLOSED {
				errs = append(errs, errors.New("wasm: failure_policy must be FAIL_CLOSED"))
			}
			sv := &wrapperspb.StringValue{}
			if err := c.GetConfiguration().UnmarshalTo(sv); err != nil {
				errs = append(errs, fmt.Errorf("wasm configuration: %w", err))
				break
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(sv.GetValue()), &got); err != nil {
				errs = append(errs, fmt.Errorf("wasm configuration: %w", err))
			} else if want := pluginConfig(t); !reflect.DeepEqual(got, want) {
				errs = append(errs, errors.New("wasm: configuration differs from plugin-config.json"))
			}
			if cl, _ := got["pdp_cluster"].(string); ports[cl] != adminPort {
				errs = append(errs, fmt.Errorf("wasm: pdp_cluster %q is not a cluster on the admin port %d", cl, adminPort))
			}
		}
	}
	if !sawAuthz {
		errs = append(errs, errors.New("no ext_authz filter"))
	}
	if sawWasm {
		errs = append(errs, checkEdgeSkip(t, b)...)
	}
	return errors.Join(errs...)
}

// checkEdgeSkip checks how a local allow of the edge filter skips ext_authz
// safely: only routes that require x-nexus-decision == "edge-allow" (or the
// health route) disable ext_authz, and the header is removed before the
// first route is chosen (early_header_mutation) and before the upstream.
func checkEdgeSkip(t *testing.T, b *bootstrapv3.Bootstrap) []error {
	t.Helper()
	hdr := edgeHeader
	var errs []error
	for _, m := range confcheck.EnvoyAnys(b) {
		hcm, ok := m.(*hcmv3.HttpConnectionManager)
		if !ok {
			continue
		}
		removedEarly := false
		for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
			hm := &earlyv3.HeaderMutation{}
			if ext.GetTypedConfig().UnmarshalTo(hm) != nil {
				continue
			}
			for _, mu := range hm.GetMutations() {
				removedEarly = removedEarly || mu.GetRemove() == hdr
			}
		}
		if !removedEarly {
			errs = append(errs, fmt.Errorf("edge: %s is not removed by early_header_mutation: a client could skip ext_authz", hdr))
		}
		if !slices.Contains(hcm.GetRouteConfig().GetRequestHeadersToRemove(), hdr) {
			errs = append(errs, fmt.Errorf("edge: %s is not removed before the upstream", hdr))
		}
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				pf := &extauthzv3.ExtAuthzPerRoute{}
				a := r.GetTypedPerFilterConfig()["envoy.filters.http.ext_authz"]
				if a == nil || a.UnmarshalTo(pf) != nil || !pf.GetDisabled() {
					continue
				}
				gated := false
				for _, h := range r.GetMatch().GetHeaders() {
					gated = gated || (h.GetName() == hdr && h.GetStringMatch().GetExact() == edgeValue && !h.GetInvertMatch())
				}
				if !gated && r.GetMatch().GetPath() != "/healthz" {
					errs = append(errs, fmt.Errorf("edge: route %v disables ext_authz without requiring %s: allow", r.GetMatch(), hdr))
				}
			}
		}
	}
	return errs
}

// clusterPorts maps each static cluster to the port of its first endpoint.
func clusterPorts(b *bootstrapv3.Bootstrap) map[string]uint32 {
	out := map[string]uint32{}
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, e := range c.GetLoadAssignment().GetEndpoints() {
			for _, lb := range e.GetLbEndpoints() {
				if _, ok := out[c.GetName()]; !ok {
					out[c.GetName()] = lb.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue()
				}
			}
		}
	}
	return out
}

func meshConfig(t *testing.T) *meshv1alpha1.MeshConfig {
	t.Helper()
	mc, err := confcheck.IstiodMeshValues(readFile(t, "istio/istiod-values.yaml"))
	if err != nil {
		t.Fatalf("istiod-values.yaml: %v", err)
	}
	return mc
}

// checkMesh validates the istiod values and that its providers point at
// nexus' ports, fail closed and use the HTTP path prefix.
func checkMesh(t *testing.T, data []byte) error {
	t.Helper()
	mc, err := confcheck.IstiodMeshValues(data)
	if err != nil {
		return err
	}
	var errs []error
	kinds := map[string]bool{}
	for _, p := range mc.GetExtensionProviders() {
		if g := p.GetEnvoyExtAuthzGrpc(); g != nil {
			kinds["grpc"] = true
			if g.GetPort() != grpcPort || g.GetFailOpen() || g.GetTimeout().AsDuration() <= 0 {
				errs = append(errs, fmt.Errorf("provider %q: want port %d, failOpen false and a timeout", p.GetName(), grpcPort))
			}
		}
		if h := p.GetEnvoyExtAuthzHttp(); h != nil {
			kinds["http"] = true
			if h.GetPort() != httpPort || h.GetFailOpen() || h.GetPathPrefix() != "/ext_authz" || h.GetTimeout().AsDuration() <= 0 {
				errs = append(errs, fmt.Errorf("provider %q: want port %d, pathPrefix /ext_authz, failOpen false and a timeout", p.GetName(), httpPort))
			}
		}
	}
	if !kinds["grpc"] || !kinds["http"] {
		errs = append(errs, errors.New("want both an envoyExtAuthzGrpc and an envoyExtAuthzHttp provider"))
	}
	return errors.Join(errs...)
}

// checkAuthzPolicies requires CUSTOM policies naming a provider of the mesh
// config.
func checkAuthzPolicies(t *testing.T, objs []confcheck.Object) error {
	t.Helper()
	providers := map[string]bool{}
	for _, p := range meshConfig(t).GetExtensionProviders() {
		providers[p.GetName()] = true
	}
	var errs []error
	for _, o := range objs {
		ap, ok := o.Typed.(*securityv1beta1.AuthorizationPolicy)
		if !ok {
			continue
		}
		if ap.GetAction() != securityv1beta1.AuthorizationPolicy_CUSTOM {
			errs = append(errs, fmt.Errorf("AuthorizationPolicy %q: action %v, want CUSTOM", o.Name, ap.GetAction()))
		}
		if !providers[ap.GetProvider().GetName()] {
			errs = append(errs, fmt.Errorf("AuthorizationPolicy %q: provider %q is not in istiod-values.yaml", o.Name, ap.GetProvider().GetName()))
		}
	}
	return errors.Join(errs...)
}

// checkWasmPlugin requires the WasmPlugin to carry plugin-config.json, with
// pdp_cluster the sidecar's outbound cluster of nexus' admin port.
func checkWasmPlugin(t *testing.T, objs []confcheck.Object) error {
	t.Helper()
	var errs []error
	n := 0
	for _, o := range objs {
		wp, ok := o.Typed.(*extensionsv1alpha1.WasmPlugin)
		if !ok {
			continue
		}
		n++
		if wp.GetPluginName() != "nexus_edge" || wp.GetPhase() != extensionsv1alpha1.PluginPhase_AUTHZ || wp.GetFailStrategy() != extensionsv1alpha1.FailStrategy_FAIL_CLOSE {
			errs = append(errs, fmt.Errorf("WasmPlugin %q: want pluginName nexus_edge, phase AUTHZ, failStrategy FAIL_CLOSE", o.Name))
		}
		j, err := protojson.Marshal(wp.GetPluginConfig())
		if err != nil {
			return err
		}
		var got map[string]any
		if err := json.Unmarshal(j, &got); err != nil {
			return err
		}
		if cl, _ := got["pdp_cluster"].(string); !regexp.MustCompile(fmt.Sprintf(`^outbound\|%d\|\|nexus-admin\.`, adminPort)).MatchString(cl) {
			errs = append(errs, fmt.Errorf("WasmPlugin %q: pdp_cluster %q is not an outbound cluster of nexus' admin Service", o.Name, cl))
		}
		// The cluster and the token are the mesh's own.
		want := pluginConfig(t)
		want["pdp_cluster"], got["pdp_cluster"] = nil, nil
		want["token"], got["token"] = nil, nil
		if !reflect.DeepEqual(got, want) {
			errs = append(errs, fmt.Errorf("WasmPlugin %q: pluginConfig differs from plugin-config.json", o.Name))
		}
	}
	if n == 0 {
		errs = append(errs, errors.New("no WasmPlugin"))
	}
	// The AuthorizationPolicy that goes with the filter skips ext_authz only
	// for what the filter allowed.
	hdr := edgeHeader
	policies := 0
	for _, o := range objs {
		ap, ok := o.Typed.(*securityv1beta1.AuthorizationPolicy)
		if !ok {
			continue
		}
		policies++
		for _, r := range ap.GetRules() {
			gated := false
			for _, c := range r.GetWhen() {
				gated = gated || (c.GetKey() == "request.headers["+hdr+"]" && slices.Equal(c.GetNotValues(), []string{edgeValue}))
			}
			if !gated {
				errs = append(errs, fmt.Errorf("AuthorizationPolicy %q: a rule does not skip requests with %s: %s", o.Name, hdr, edgeValue))
			}
		}
	}
	if policies == 0 {
		errs = append(errs, errors.New("no AuthorizationPolicy next to the WasmPlugin"))
	}
	if err := checkAuthzPolicies(t, objs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkCompose validates the compose file in place (its mounts are relative
// to its folder) or, for a changed copy, in a temporary copy of the folder.
func checkCompose(t *testing.T, data []byte) error {
	t.Helper()
	path := filepath.Join(envoyDir, "docker-compose.yaml")
	if orig := readFile(t, "docker-compose.yaml"); string(orig) != string(data) {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(filepath.Dir(envoyDir))); err != nil {
			return err
		}
		path = filepath.Join(dir, "envoy", "docker-compose.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	c, err := confcheck.ComposeFile(path)
	if err != nil {
		return err
	}
	for _, s := range []string{"envoy", "nexus", "upstream"} {
		if _, ok := c.Services[s]; !ok {
			return fmt.Errorf("service %q missing", s)
		}
	}
	return nil
}

// checkClusterCompose validates the cluster's compose file (in a copy of
// the folder when changed) and what a cluster must get right
// (confcheck.ComposeCluster).
func checkClusterCompose(t *testing.T, data []byte) error {
	t.Helper()
	const name = "docker-compose-cluster.yaml"
	path := filepath.Join(envoyDir, name)
	if orig := readFile(t, name); string(orig) != string(data) {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(filepath.Dir(envoyDir))); err != nil {
			return err
		}
		path = filepath.Join(dir, "envoy", name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
	}
	c, err := confcheck.ComposeFile(path)
	if err != nil {
		return err
	}
	return confcheck.ComposeCluster(c)
}

// checkKubeCluster checks the cluster's manifest against the NATS that
// nats-values.yaml installs (confcheck.KubeCluster) and the rules of every
// nexus manifest.
func checkKubeCluster(t *testing.T, objs []confcheck.Object) error {
	t.Helper()
	nats, err := confcheck.NATSHelmValues(readFile(t, "kubernetes/nats-values.yaml"))
	if err != nil {
		return err
	}
	return errors.Join(confcheck.KubeCluster(objs, nats), confcheck.OneStore(objs), confcheck.NoDemoData(objs), confcheck.AdminClosed(objs))
}

// TestDeployFiles validates every deployment file as it is.
func TestDeployFiles(t *testing.T) {
	for _, f := range deployFiles() {
		t.Run(f.name, func(t *testing.T) {
			if err := f.validate(t, readFile(t, f.name)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeployFilesRejectTypos misspells each key of each file in turn and
// requires the validation to fail, so a typo in any file cannot pass.
func TestDeployFilesRejectTypos(t *testing.T) {
	for _, f := range deployFiles() {
		t.Run(f.name, func(t *testing.T) {
			typos, err := confcheck.KeyTypos(readFile(t, f.name))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.validate(t, typos[0].Data); err != nil {
				t.Fatalf("the re-encoded file does not validate: %v", err)
			}
			if len(typos) < 5 {
				t.Fatalf("only %d keys found", len(typos)-1)
			}
			checked := 0
			for _, ty := range typos[1:] {
				if f.freeForm != nil && f.freeForm.MatchString(ty.Path) {
					continue
				}
				checked++
				if err := f.validate(t, ty.Data); err == nil {
					t.Errorf("misspelt key %s: accepted", ty.Path)
				}
			}
			t.Logf("%d misspelt keys rejected", checked)
		})
	}
}

// TestDeployFilesRejectMistakes makes one well-formed but wrong change to a
// real file and requires the validation to fail: the checks beyond the
// schemas hold.
func TestDeployFilesRejectMistakes(t *testing.T) {
	files := map[string]deployFile{}
	for _, f := range deployFiles() {
		files[f.name] = f
	}
	tests := []struct {
		name, file, old, new string
	}{
		{name: "fail open", file: "envoy-ext-authz-grpc.yaml", old: "failure_mode_allow: false", new: "failure_mode_allow: true"},
		{name: "no check timeout", file: "envoy-ext-authz-grpc.yaml", old: "                timeout: 0.25s\n", new: "\n"},
		{name: "wrong gRPC port", file: "envoy-ext-authz-grpc.yaml", old: "port_value: 9191", new: "port_value: 9192"},
		{name: "wrong HTTP path prefix", file: "envoy-ext-authz-http.yaml", old: "path_prefix: /ext_authz", new: "path_prefix: /authz"},
		{name: "undefined cluster", file: "envoy-ext-authz-http.yaml", old: "cluster: nexus_http\n", new: "cluster: nexus\n"},
		{name: "plugin config drifted", file: "envoy-wasm.yaml", old: `"refresh_period_ms": 5000`, new: `"refresh_period_ms": 5001`},
		{name: "client may set the edge header", file: "envoy-wasm.yaml", old: "- remove: x-nexus-decision", new: "- remove: x-nexus-other"},
		{name: "ext_authz skipped without the edge header", file: "envoy-wasm.yaml", old: "string_match: { exact: edge-allow }", new: "string_match: { exact: edge-allowed }"},
		{name: "plugin config names the gRPC cluster", file: "envoy-wasm.yaml", old: "pdp_cluster\": \"nexus_admin", new: "pdp_cluster\": \"nexus_grpc"},
		{name: "mesh provider fails open", file: "istio/istiod-values.yaml", old: "failOpen: false", new: "failOpen: true"},
		{name: "policy not CUSTOM", file: "istio/authorization-policy.yaml", old: "action: CUSTOM", new: "action: ALLOW"},
		{name: "unknown provider", file: "istio/authorization-policy.yaml", old: "name: nexus-grpc", new: "name: nexus-rpc"},
		{name: "WasmPlugin config drifted", file: "istio/wasm-plugin.yaml", old: "refresh_period_ms: 5000", new: "refresh_period_ms: 5001"},
		{name: "edge policy skips ext_authz always", file: "istio/wasm-plugin.yaml", old: `notValues: ["edge-allow"]`, new: `notValues: ["deny"]`},
		{name: "selector misses pods", file: "kubernetes/nexus.yaml", old: "    matchLabels:\n      app.kubernetes.io/name: nexus\n  template", new: "    matchLabels:\n      app.kubernetes.io/name: nexux\n  template"},
		{name: "probe on a missing port", file: "kubernetes/sidecar.yaml", old: "path: /readyz\n            port: admin", new: "path: /readyz\n            port: http-admin"},
		{name: "compose mounts a missing file", file: "docker-compose.yaml", old: "./envoy-ext-authz-http.yaml:", new: "./envoy-ext-authz-https.yaml:"},
		{name: "compose builds a missing stage", file: "docker-compose.yaml", old: "target: nexus", new: "target: nexus-server"},
		{name: "replica names another NATS", file: "kubernetes/nexus-cluster.yaml", old: "nats://nats.nats.svc.cluster.local:4222", new: "nats://nats.default.svc.cluster.local:4222"},
		{name: "replica on the wrong NATS port", file: "kubernetes/nexus-cluster.yaml", old: "nats://nats.nats.svc.cluster.local:4222", new: "nats://nats.nats.svc.cluster.local:6222"},
		{name: "more stream replicas than NATS servers", file: "kubernetes/nexus-cluster.yaml", old: "stream_replicas: 3", new: "stream_replicas: 5"},
		{name: "cluster replicas share one store", file: "kubernetes/nexus-cluster.yaml", old: "kind: StatefulSet", new: "kind: Deployment"},
		{name: "NATS without JetStream", file: "kubernetes/nats-values.yaml", old: "  jetstream:\n    enabled: true", new: "  jetstream:\n    enabled: false"},
		{name: "NATS without a quorum", file: "kubernetes/nats-values.yaml", old: "replicas: 3", new: "replicas: 1"},
		{name: "NATS log off persistent volumes", file: "kubernetes/nats-values.yaml", old: "    fileStore:\n      pvc:\n", new: "    fileStore:\n      pvc:\n        enabled: false\n"},
		{name: "replica misses a NATS server", file: "docker-compose-cluster.yaml", old: "    - --cluster=nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222\n    - --cluster-name=demo\n    - --grpc-addr=0.0.0.0:9191\n    - --http-addr=0.0.0.0:8181\n    - --admin-addr=0.0.0.0:8282\n    - --admin-token-file=/run/secrets/nexus-admin-token\n    - --data-dir=/var/lib/nexus\n    - --trusted-subject-header=x-user\n    secrets: [nexus-admin-token]\n    volumes:\n    - ./nexus-cluster.yaml:/etc/nexus/nexus.yaml:ro\n    - nexus-3-data", new: "    - --cluster=nats://nats-1:4222,nats://nats-2:4222\n    - --cluster-name=demo\n    - --grpc-addr=0.0.0.0:9191\n    - --http-addr=0.0.0.0:8181\n    - --admin-addr=0.0.0.0:8282\n    - --admin-token-file=/run/secrets/nexus-admin-token\n    - --data-dir=/var/lib/nexus\n    - --trusted-subject-header=x-user\n    secrets: [nexus-admin-token]\n    volumes:\n    - ./nexus-cluster.yaml:/etc/nexus/nexus.yaml:ro\n    - nexus-3-data"},
		{name: "replica on the NATS cluster port", file: "docker-compose-cluster.yaml", old: "    - --cluster=nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222\n    - --cluster-name=demo\n    - --grpc-addr=0.0.0.0:9191\n    - --http-addr=0.0.0.0:8181\n    - --admin-addr=0.0.0.0:8282\n    - --admin-token-file=/run/secrets/nexus-admin-token\n    - --data-dir=/var/lib/nexus\n    - --trusted-subject-header=x-user\n    secrets: [nexus-admin-token]\n    volumes:\n    - ./nexus-cluster.yaml:/etc/nexus/nexus.yaml:ro\n    - nexus-2-data", new: "    - --cluster=nats://nats-1:6222,nats://nats-2:4222,nats://nats-3:4222\n    - --cluster-name=demo\n    - --grpc-addr=0.0.0.0:9191\n    - --http-addr=0.0.0.0:8181\n    - --admin-addr=0.0.0.0:8282\n    - --admin-token-file=/run/secrets/nexus-admin-token\n    - --data-dir=/var/lib/nexus\n    - --trusted-subject-header=x-user\n    secrets: [nexus-admin-token]\n    volumes:\n    - ./nexus-cluster.yaml:/etc/nexus/nexus.yaml:ro\n    - nexus-2-data"},
		{name: "replicas share a store", file: "docker-compose-cluster.yaml", old: "    - nexus-3-data:/var/lib/nexus", new: "    - nexus-2-data:/var/lib/nexus"},
		{name: "replicas in two clusters", file: "docker-compose-cluster.yaml", old: "    - --cluster-name=demo\n    - --grpc-addr=0.0.0.0:9191\n    - --http-addr=0.0.0.0:8181\n    - --admin-addr=0.0.0.0:8282\n    - --admin-token-file=/run/secrets/nexus-admin-token\n    - --data-dir=/var/lib/nexus\n    - --trusted-subject-header=x-user\n    secrets: [nexus-admin-token]\n    volumes:\n    - ./nexus-cluster.yaml:/etc/nexus/nexus.yaml:ro\n    - nexus-3-data", new: "    - --cluster-name=other\n    - --grpc-addr=0.0.0.0:9191\n    - --http-addr=0.0.0.0:8181\n    - --admin-addr=0.0.0.0:8282\n    - --admin-token-file=/run/secrets/nexus-admin-token\n    - --data-dir=/var/lib/nexus\n    - --trusted-subject-header=x-user\n    secrets: [nexus-admin-token]\n    volumes:\n    - ./nexus-cluster.yaml:/etc/nexus/nexus.yaml:ro\n    - nexus-3-data"},
		{name: "NATS server without JetStream", file: "docker-compose-cluster.yaml", old: `["--name", "nats-2", "--jetstream", `, new: `["--name", "nats-2", `},
		{name: "NATS server not routed", file: "docker-compose-cluster.yaml", old: `"--routes", "nats://nats-1:6222,nats://nats-2:6222,nats://nats-3:6222"]
    volumes:
    - nats-3-data`, new: `"--routes", "nats://nats-1:6222,nats://nats-3:6222"]
    volumes:
    - nats-3-data`},
		{name: "JetStream store not on a volume", file: "docker-compose-cluster.yaml", old: "    - nats-1-data:/data\n", new: "    - nats-1-data:/other\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := files[tt.file]
			if !ok {
				t.Fatalf("no file %s", tt.file)
			}
			orig := string(readFile(t, tt.file))
			if !strings.Contains(orig, tt.old) {
				t.Fatalf("%q is not in %s", tt.old, tt.file)
			}
			err := f.validate(t, []byte(strings.Replace(orig, tt.old, tt.new, 1)))
			if err == nil {
				t.Fatal("accepted")
			}
			t.Logf("rejected: %v", err)
		})
	}
}
