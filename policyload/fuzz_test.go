package policyload_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/policyload"
)

// FuzzFromTarGz feeds random archives to FromTarGz, as a bundle server
// might: it never panics, its errors are of the documented kinds, and
// what it accepts is a bundle with the entrypoint.
func FuzzFromTarGz(f *testing.F) {
	f.Add(makeTarGz(f, tarEntry{name: "/p/p.rego", body: "package p\n\nallow if input.x == data.p.y\n"}, tarEntry{name: "/p/data.json", body: `{"y": 1}`}, tarEntry{name: "/.manifest", body: `{"revision": "r", "roots": ["p"]}`}))
	f.Add(makeTarGz(f, tarEntry{name: "../x.rego", body: "package p\n"}))
	f.Add(makeTarGz(f, tarEntry{name: "/patch.json", body: `{"data": [{"op": "upsert", "path": "/a", "value": 1}]}`}))
	f.Add([]byte{0x1f, 0x8b})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := policyload.FromTarGz(t.Context(), bytes.NewReader(raw), policyload.Options{Entrypoints: []string{"p/allow"}})
		if err != nil {
			var cerrs compiler.Errors
			if !errors.Is(err, bundle.ErrInvalid) && !errors.Is(err, bundle.ErrTooLarge) && !errors.As(err, &cerrs) &&
				!errors.Is(err, policyload.ErrMixedRegoVersions) && !errors.Is(err, compiler.ErrNoEntrypoint) {
				t.Fatalf("an error of no known kind: %v", err)
			}
			return
		}
		if len(b.Wasm) < 8 || len(b.Manifest.Entrypoints) == 0 {
			t.Fatalf("accepted an incomplete bundle: %+v", b.Manifest)
		}
	})
}
