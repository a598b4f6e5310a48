package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture/damage"
)

// damagedDir returns a data directory whose relations.db is a copy of
// base with the first flip matching pick applied.
func damagedDir(t *testing.T, base string, pick func(damage.Flip) bool) string {
	t.Helper()
	for _, f := range damage.Flips(t, base, 0, 0) {
		if pick(f) {
			return filepath.Dir(f.Apply(t, base))
		}
	}
	t.Fatal("no such flip")
	return ""
}

func TestRelVerify(t *testing.T) {
	base := damage.Base(t)
	sound := t.TempDir()
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sound, relDataFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runNexus(t, "", "rel", "verify", "--data-dir="+sound)
	if err != nil || !strings.Contains(out, "no damage found") || !strings.Contains(out, "tuples") {
		t.Fatalf("verify of a sound store: %v\n%s", err, out)
	}
	// A damaged leaf of the object-first index: opening the store does not
	// read it, verify does.
	leaf := damagedDir(t, base, func(f damage.Flip) bool {
		return f.Page.Bucket == "obj" && f.Page.Kind == "leaf" && !f.Read && strings.HasSuffix(f.Name, "/count-high")
	})
	out, err = runNexus(t, "", "rel", "verify", "--data-dir="+leaf)
	if err == nil || !strings.Contains(out, "is damaged:\n  ") || !strings.Contains(out, "restore it from a backup") {
		t.Fatalf("verify of a damaged leaf: %v\n%s", err, out)
	}
	// A damaged root page: opening fails with what to do.
	root := damagedDir(t, base, func(f damage.Flip) bool {
		return f.Page.Bucket == "obj" && f.Page.Root && strings.HasSuffix(f.Name, "/flags")
	})
	out, err = runNexus(t, "", "rel", "check", "file:report.pdf", "read", "user:bob", "--data-dir="+root)
	if !errors.Is(err, datastore.ErrCorrupt) || !strings.Contains(out, "nexus rel verify --data-dir "+root) || !strings.Contains(out, `bucket "obj"`) {
		t.Fatalf("check on a damaged root: %v\n%s", err, out)
	}
	if _, err := openStore(context.Background(), serveConfig{DataDir: root}, slog.New(slog.DiscardHandler)); !errors.Is(err, datastore.ErrCorrupt) || !strings.Contains(err.Error(), "nexus rel verify") {
		t.Fatalf("serve on a damaged root: %v", err)
	}
	if _, err := runNexus(t, "", "rel", "verify", "--data-dir="+t.TempDir()); err == nil || !strings.Contains(err.Error(), "no relationship store") {
		t.Fatalf("verify without a store: %v", err)
	}
}
