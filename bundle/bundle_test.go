package bundle_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
)

// minimal is the smallest bundle Read accepts: a module that is only the
// Wasm header, one entrypoint, empty data.
func minimal() *bundle.Bundle {
	return &bundle.Bundle{Manifest: bundle.Manifest{Entrypoints: []string{"a/b"}}, Wasm: []byte("\x00asm\x01\x00\x00\x00"), Data: []byte(`{}`)}
}

func encode(t testing.TB, b *bundle.Bundle) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	b := &bundle.Bundle{
		Manifest: bundle.Manifest{
			Revision:    "r1",
			Roots:       []string{"z", "nexus/authz"},
			Entrypoints: []string{"nexus/authz/allow", "nexus/authz/reason"},
			Metadata:    map[string]any{bundle.MetadataInputPaths: []any{[]any{"user"}}},
		},
		Wasm: []byte("\x00asm\x01\x00\x00\x00more"),
		Data: []byte(`{"big":12345678901234567890}`),
	}
	raw := encode(t, b)
	if again := encode(t, b); !bytes.Equal(raw, again) {
		t.Fatal("Write is not deterministic")
	}
	got, err := bundle.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Wasm, b.Wasm) || !bytes.Equal(got.Data, b.Data) {
		t.Fatalf("wasm or data changed: %q %s", got.Wasm, got.Data)
	}
	want := b.Manifest
	want.Roots = []string{"nexus/authz", "z"} // Read sorts the roots
	if !reflect.DeepEqual(got.Manifest, want) {
		t.Fatalf("manifest %+v, want %+v", got.Manifest, want)
	}
}

// TestManifestJSON holds the manifest to OPA's format: entrypoints are wasm
// resolvers naming the module, roots are never null.
func TestManifestJSON(t *testing.T) {
	got, err := json.Marshal(bundle.Manifest{Revision: "r", Entrypoints: []string{"p/allow"}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"revision":"r","roots":[],"wasm":[{"entrypoint":"p/allow","module":"/policy.wasm"}]}`
	if string(got) != want {
		t.Fatalf("manifest JSON %s, want %s", got, want)
	}
	var back bundle.Manifest
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if back.Revision != "r" || !slices.Equal(back.Entrypoints, []string{"p/allow"}) {
		t.Fatalf("read back %+v", back)
	}
}

// TestReadIgnoresOtherFiles reads an archive as OPA writes it: "./"
// prefixes, directories and Rego sources besides the three files.
func TestReadIgnoresOtherFiles(t *testing.T) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	man, _ := json.Marshal(bundle.Manifest{Revision: "opa", Entrypoints: []string{"p/allow"}})
	for _, f := range []struct {
		name string
		typ  byte
		body string
	}{
		{"./p/", tar.TypeDir, ""},
		{"./p/policy.rego", tar.TypeReg, "package p\n"},
		{"./policy.wasm", tar.TypeReg, "\x00asm\x01\x00\x00\x00"},
		{"./.manifest", tar.TypeReg, string(man)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: f.typ, Mode: 0o644, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Revision != "opa" || string(b.Data) != "{}" {
		t.Fatalf("manifest %+v, data %s", b.Manifest, b.Data)
	}
}

func TestReadErrors(t *testing.T) {
	noEP := minimal()
	noEP.Manifest.Entrypoints = nil
	badWasm := minimal()
	badWasm.Wasm = []byte("not wasm")
	badData := minimal()
	badData.Data = []byte(`[1,2]`)
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{name: "empty", in: nil, want: bundle.ErrInvalid},
		{name: "not gzip", in: []byte("hello"), want: bundle.ErrInvalid},
		{name: "no entrypoints", in: encode(t, noEP), want: bundle.ErrInvalid},
		{name: "not wasm", in: encode(t, badWasm), want: bundle.ErrInvalid},
		{name: "data not an object", in: encode(t, badData), want: bundle.ErrInvalid},
		{name: "truncated", in: encode(t, minimal())[:40], want: bundle.ErrInvalid},
		{name: "no manifest", in: archive(t, tarFile{"/policy.wasm", "\x00asm\x01\x00\x00\x00"}), want: bundle.ErrInvalid},
		{name: "no module", in: archive(t, tarFile{"/.manifest", `{"wasm":[{"entrypoint":"a/b"}]}`}), want: bundle.ErrInvalid},
		{name: "two modules", in: archive(t, tarFile{"/policy.wasm", "\x00asm\x01\x00\x00\x00"}, tarFile{"policy.wasm", "\x00asm\x01\x00\x00\x00"}), want: bundle.ErrInvalid},
		{name: "bad manifest", in: archive(t, tarFile{"/.manifest", `{"wasm":1}`}), want: bundle.ErrInvalid},
		{name: "file larger than the limit", in: hugeHeader(t), want: bundle.ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := bundle.Read(bytes.NewReader(tc.in)); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := bundle.Read(bytes.NewReader(encode(t, minimal()))); err != nil {
		t.Fatalf("valid minimal bundle: %v", err)
	}
}

type tarFile struct{ name, body string }

// archive writes files into a .tar.gz as given (no defaults added).
func archive(t *testing.T, files ...tarFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hugeHeader is an archive whose one header claims a file of more than
// MaxBytes; the body is never written.
func hugeHeader(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: "/data.json", Typeflag: tar.TypeReg, Mode: 0o644, Size: bundle.MaxBytes + 1}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Flush(); err == nil {
		t.Fatal("tar accepted a missing body") // Flush reports the unwritten bytes
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
