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
