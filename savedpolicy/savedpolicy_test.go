package savedpolicy_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/savedpolicy"
)

// raw is a minimal bundle of revision rev (the Wasm is only its header:
// nothing here runs it).
func raw(t *testing.T, rev string) []byte {
	t.Helper()
	b := &bundle.Bundle{
		Manifest: bundle.Manifest{Revision: rev, Entrypoints: []string{"nexus/authz/decision"}},
		Wasm:     []byte("\x00asm\x01\x00\x00\x00"),
		Data:     []byte("{}"),
	}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSaveRead(t *testing.T) {
	ctx := context.Background()
	f := &savedpolicy.File{Path: filepath.Join(t.TempDir(), savedpolicy.Name)}
	if s, err := f.Read(); s != nil || err != nil {
		t.Fatalf("Read of nothing = %v, %v", s, err)
	}
	if err := f.Save(ctx, raw(t, "r1"), "r1", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A load that fails leaves the saved policy as it was.
	boom := errors.New("does not load")
	if err := f.Save(ctx, raw(t, "r2"), "r2", func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Save with a failing load = %v", err)
	}
	s, err := f.Read()
	if err != nil || s == nil || s.Bundle.Manifest.Revision != "r1" {
		t.Fatalf("Read = %+v, %v; want r1", s, err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(f.Path), ".*tmp*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
	if err := f.Save(ctx, raw(t, "r3"), "r3", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if s, err := f.Read(); err != nil || s.Bundle.Manifest.Revision != "r3" {
		t.Fatalf("Read = %+v, %v; want r3", s, err)
	}
}

// TestReadDamaged: every single-byte change and every truncation of the
// file is a *DamagedError, never another policy.
func TestReadDamaged(t *testing.T) {
	ctx := context.Background()
	f := &savedpolicy.File{Path: filepath.Join(t.TempDir(), savedpolicy.Name)}
	if err := f.Save(ctx, raw(t, "r1"), "r1", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	try := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(f.Path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := f.Read()
		var de *savedpolicy.DamagedError
		if !errors.As(err, &de) {
			// A change the JSON header reads the same (a digit's case in
			// the digest is not one: hex is lower case).
			if s != nil && bytes.Equal(s.Raw, good[bytes.IndexByte(good, '\n')+1:]) && s.Bundle.Manifest.Revision == "r1" {
				return
			}
			t.Fatalf("%s: Read = %+v, %v; want a *DamagedError", name, s, err)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		try("flip", b)
	}
	for n := 0; n < len(good); n += 7 {
		try("truncate", good[:n])
	}
}
