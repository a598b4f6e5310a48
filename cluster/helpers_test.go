package cluster_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
)

const testSchema = `
types:
  user: {}
  doc:
    relations:
      owner: [user]
      viewer: [user]
    permissions:
      read: viewer + owner
`

// replica is a cluster.Replica with its own store.
type replica struct {
	*cluster.Replica
	store *datastore.BoltStore
	reg   *prometheus.Registry
	path  string
}

func testLogger() *slog.Logger {
	if os.Getenv("NEXUS_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newReplica starts a replica on a fresh store (or the store at path, if
// given) and closes both when the test ends.
func newReplica(t testing.TB, cfg cluster.Config, path string) *replica {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "nexus.db")
	}
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = s
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	r, err := cluster.New(ctx, cfg)
	if err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	rep := &replica{Replica: r, store: s, reg: reg, path: path}
	t.Cleanup(rep.close)
	return rep
}

func (r *replica) close() {
	_ = r.Replica.Close()
	_ = r.store.Close()
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFollowing waits until the replica follows the log.
func waitFollowing(t testing.TB, r *replica) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if !r.Status().Degraded {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("replica still degraded: %+v", r.Status())
}

func mustSchema(t testing.TB, r *replica, src string) datastore.Revision {
	t.Helper()
	sc, err := schema.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rev, err := r.WriteSchema(ctxT(t, 20*time.Second), sc, false)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

func export(t testing.TB, s *datastore.BoltStore) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := s.Export(context.Background(), &b, datastore.FormatNDJSON); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// converge waits until every replica applied rev and checks that their
// exports are byte for byte the same.
func converge(t testing.TB, rev datastore.Revision, rs ...*replica) []byte {
	t.Helper()
	for i, r := range rs {
		if err := waitRev(r, rev, 30*time.Second); err != nil {
			t.Fatalf("replica %d: %v (status %+v)", i, err, r.Status())
		}
	}
	want := export(t, rs[0].store)
	for i, r := range rs[1:] {
		if got := export(t, r.store); !bytes.Equal(got, want) {
			t.Fatalf("replica %d (at %d) export differs from replica 0 (at %d): %s", i+1, r.Revision(), rs[0].Revision(), lineDiff(got, want))
		}
	}
	return want
}

// waitRev waits for rev with a longer bound than MaxWait.
func waitRev(r *replica, rev datastore.Revision, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := r.WaitRevision(context.Background(), rev)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// lineDiff lists the lines only one of two exports has.
func lineDiff(got, want []byte) string {
	in := func(b []byte) map[string]bool {
		m := map[string]bool{}
		for _, l := range bytes.Split(b, []byte("\n")) {
			m[string(l)] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var out []string
	for l := range g {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	for l := range w {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	if len(out) == 0 {
		return "same lines, another order"
	}
	return strings.Join(out, "\n")
}
