package datastore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/internal/storetest"
)

func openTemp(t testing.TB, cfg datastore.Config) *datastore.BoltStore {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = filepath.Join(t.TempDir(), "nexus.db")
	}
	s, err := datastore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) datastore.Store { return openTemp(t, datastore.Config{}) })
}

func TestCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s := openTemp(t, datastore.Config{Path: path})
	storetest.MustDrive(t, s)
	want, _ := s.Read(context.Background(), datastore.Filter{})
	rev, _ := s.Revision(context.Background())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before, after, err := datastore.Compact(context.Background(), path)
	if err != nil || after <= 0 || after > before {
		t.Fatalf("Compact = %d, %d, %v", before, after, err)
	}
	s2 := openTemp(t, datastore.Config{Path: path})
	got, _ := s2.Read(context.Background(), datastore.Filter{})
	rev2, _ := s2.Revision(context.Background())
	if len(got) != len(want) || rev2 != rev {
		t.Fatalf("after compact: %d tuples rev %d, want %d rev %d", len(got), rev2, len(want), rev)
	}
	if ok, err := s2.CheckString(context.Background(), "file:report.pdf", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("check after compact: %v %v", ok, err)
	}
}
