package bundle_test

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
)

// TestNondeterministicRoundTrip: what the compiler records survives Write
// and Read, and a manifest without it (OPA's opa build) is unknown.
func TestNondeterministicRoundTrip(t *testing.T) {
	b := minimal()
	b.Manifest.Roots = []string{"p"}
	b.Manifest.Entrypoints = []string{"p/now", "p/allow"}
	b.Manifest.Metadata = map[string]any{bundle.MetadataNondeterministic: map[string]any{
		"p/now":   []any{"http.send", "time.now_ns"},
		"p/allow": []any{},
	}}
	got, err := bundle.Read(bytes.NewReader(encode(t, b)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Manifest, b.Manifest) {
		t.Fatalf("manifest %+v, want %+v", got.Manifest, b.Manifest)
	}
	tests := []struct {
		name, entrypoint string
		want             []string
		known            bool
	}{
		{"non-deterministic", "p/now", []string{"http.send", "time.now_ns"}, true},
		{"deterministic", "p/allow", []string{}, true},
		{"entrypoint not recorded", "p/other", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names, known := got.Manifest.Nondeterministic(tt.entrypoint)
			if known != tt.known || !reflect.DeepEqual(names, tt.want) {
				t.Fatalf("Nondeterministic(%q) = %q, %v; want %q, %v", tt.entrypoint, names, known, tt.want, tt.known)
			}
		})
	}
}

// TestNondeterministicUnknown: a manifest that records nothing, or
// something malformed, is unknown, never deterministic.
func TestNondeterministicUnknown(t *testing.T) {
	tests := []struct {
		name     string
		metadata map[string]any
	}{
		{"opa build", nil},
		{"other metadata only", map[string]any{bundle.MetadataInputPaths: []any{[]any{"user"}}}},
		{"not an object", map[string]any{bundle.MetadataNondeterministic: []any{"p/a"}}},
		{"not a list", map[string]any{bundle.MetadataNondeterministic: map[string]any{"p/a": "time.now_ns"}}},
		{"not strings", map[string]any{bundle.MetadataNondeterministic: map[string]any{"p/a": []any{1.0}}}},
		{"empty name", map[string]any{bundle.MetadataNondeterministic: map[string]any{"p/a": []any{""}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := bundle.Manifest{Entrypoints: []string{"p/a"}, Metadata: tt.metadata}
			if names, known := m.Nondeterministic("p/a"); known {
				t.Fatalf("Nondeterministic = %q, known; want unknown", names)
			}
		})
	}
}
