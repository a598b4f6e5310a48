package bundle_test

import (
	"bytes"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
)

// FuzzRead feeds random archives to Read: errors, never panics.
func FuzzRead(f *testing.F) {
	b := &bundle.Bundle{Manifest: bundle.Manifest{Revision: "r", Entrypoints: []string{"a/b"}}, Wasm: []byte("\x00asm\x01\x00\x00\x00"), Data: []byte(`{"x":1}`)}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := bundle.Read(bytes.NewReader(raw))
		if err != nil {
			return
		}
		if len(got.Manifest.Entrypoints) == 0 || len(got.Wasm) < 8 {
			t.Fatalf("accepted an incomplete bundle: %+v", got.Manifest)
		}
		// What was read can be written and read again.
		var out bytes.Buffer
		if err := got.Write(&out); err != nil {
			t.Fatal(err)
		}
		if _, err := bundle.Read(&out); err != nil {
			t.Fatalf("re-read: %v", err)
		}
	})
}
