package confcheck

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// addDeployFiles seeds f with the real files under envoy/.
func addDeployFiles(f *testing.F, names ...string) {
	f.Helper()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "envoy", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzEnvoyBootstrap: any bytes give a bootstrap or an error, never a panic.
func FuzzEnvoyBootstrap(f *testing.F) {
	addDeployFiles(f, "envoy-ext-authz-grpc.yaml", "envoy-ext-authz-http.yaml", "envoy-wasm.yaml")
	f.Add([]byte(minimal))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := EnvoyBootstrap(data)
		if err == nil && b == nil {
			t.Fatal("nil bootstrap without an error")
		}
	})
}

// FuzzManifests: any bytes give objects or an error, never a panic
// (Kubernetes kinds only: the Istio CRDs are not loaded here).
func FuzzManifests(f *testing.F) {
	addDeployFiles(f, "kubernetes/nexus.yaml", "kubernetes/sidecar.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Manifests(context.Background(), data, nil)
		if err == nil {
			for _, o := range objs {
				if o.Typed == nil || o.Name == "" {
					t.Fatalf("object %v without type or name", o.GVK)
				}
			}
		}
	})
}

// FuzzIstiodMeshValues: any bytes give a MeshConfig or an error.
func FuzzIstiodMeshValues(f *testing.F) {
	addDeployFiles(f, "istio/istiod-values.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		mc, err := IstiodMeshValues(data)
		if err == nil && mc == nil {
			t.Fatal("nil MeshConfig without an error")
		}
	})
}

// FuzzKeyTypos: every typo of a stream that parses changes exactly that
// stream, and the first entry is the stream unchanged.
func FuzzKeyTypos(f *testing.F) {
	addDeployFiles(f, "istio/authorization-policy.yaml", "docker-compose.yaml")
	f.Add([]byte("a: {b: [1, {c: 2}]}\n---\nd: 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		typos, err := KeyTypos(data)
		if err != nil {
			return
		}
		if len(typos) == 0 || typos[0].Path != "" {
			t.Fatal("first entry is not the unchanged stream")
		}
		for _, ty := range typos[1:] {
			if string(ty.Data) == string(typos[0].Data) {
				t.Fatalf("typo at %s changed nothing", ty.Path)
			}
		}
	})
}
