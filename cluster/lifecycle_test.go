package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// purge drops the log's entries below seq, as retention would.
func purge(t *testing.T, ns *natstest.Cluster, seq uint64) {
	t.Helper()
	nc, err := nats.Connect(strings.Join(ns.URLs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := ctxT(t, 10*time.Second)
	s, err := js.Stream(ctx, "nexus-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
		t.Fatal(err)
	}
}

func writeN(t *testing.T, r *replica, prefix string, n int) datastore.Revision {
	t.Helper()
	var rev datastore.Revision
	var err error
	for i := range n {
		if rev, err = r.Write(ctxT(t, 20*time.Second), datastore.WriteRequest{Touches: fixture.Tuples(t, fmt.Sprintf("doc:%s-%d#viewer@user:u%d", prefix, i, i))}); err != nil {
			t.Fatal(err)
		}
	}
	return rev
}

// TestBehindRetention: a replica restarted on its data directory after the
// log dropped the entries it misses restores a snapshot and replays the
// tail; one that no snapshot can bring back reports it, refuses writes,
// and recovers by itself once a newer snapshot exists.
func TestBehindRetention(t *testing.T) {
	ns := natstest.Start(t, 1)
	cfg := cluster.Config{URLs: ns.URLs(), SnapshotInterval: -1}
	a := newReplica(t, cfg, "")
	waitFollowing(t, a)
	mustSchema(t, a, testSchema)

	b := newReplica(t, cfg, "")
	waitFollowing(t, b)
	rev := writeN(t, a, "one", 5)
	converge(t, rev, a, b)
	bpath := b.path
	b.close() // b goes away

	writeN(t, a, "two", 5)
	snap, err := a.Snapshot(ctxT(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	last := writeN(t, a, "three", 5)
	purge(t, ns, uint64(snap)+1) // the log keeps snap+1.. only

	b = newReplica(t, cfg, bpath) // b comes back on its data directory
	converge(t, last, a, b)
	if n := counter(t, b, "nexus_cluster_snapshots_total"); n != 1 {
		t.Fatalf("b restored %v snapshots, want 1", n)
	}

	// c starts empty after the log dropped entries past every snapshot.
	last = writeN(t, a, "four", 3)
	purge(t, ns, uint64(last))
	c := newReplica(t, cfg, "")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.Status().Reason, "no snapshot reaches") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := c.Status(); !st.Degraded || !strings.Contains(st.Reason, "no snapshot reaches") {
		t.Fatalf("c status %+v, want degraded: no snapshot reaches the log", st)
	}
	if _, err := c.Write(context.Background(), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:x#viewer@user:x")}); !errors.Is(err, cluster.ErrUnavailable) || !errors.Is(err, cluster.ErrDiverged) {
		t.Fatalf("c write = %v, want ErrUnavailable and ErrDiverged", err)
	}
	if _, err := a.Snapshot(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	last = writeN(t, a, "five", 2)
	converge(t, last, a, b, c)
}

// TestStartWithoutNATS: a replica started while NATS is down answers reads
// from its store, refuses writes, and catches up once NATS is there.
func TestStartWithoutNATS(t *testing.T) {
	ns := natstest.Start(t, 1)
	cfg := cluster.Config{URLs: ns.URLs(), SnapshotInterval: -1}
	a := newReplica(t, cfg, "")
	waitFollowing(t, a)
	mustSchema(t, a, testSchema)
	rev := writeN(t, a, "a", 3)
	apath := a.path
	a.close()
	ns.StopAll()

	start := time.Now()
	a = newReplica(t, cfg, apath)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("New took %v with NATS down", took)
	}
	if st := a.Status(); !st.Degraded || st.Applied != rev {
		t.Fatalf("status %+v, want degraded at %d", st, rev)
	}
	if ok, err := fixture.CheckText(context.Background(), a.store, "doc:a-1", "read", "user:u1"); err != nil || !ok {
		t.Fatalf("read with NATS down: %v, %v", ok, err)
	}
	if _, err := a.Write(context.Background(), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:x#viewer@user:x")}); !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("write with NATS down = %v, want ErrUnavailable", err)
	}
	if err := a.Sync(ctxT(t, time.Second)); !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("Sync with NATS down = %v, want ErrUnavailable", err)
	}
	ns.RestartAll(t)
	waitFollowing(t, a)
	rev = writeN(t, a, "b", 2)
	if err := a.Sync(ctxT(t, 5*time.Second)); err != nil || a.Revision() != rev {
		t.Fatalf("Sync = %v at %d, want nil at %d", err, a.Revision(), rev)
	}
}

// TestPolicyBeforeRevision: a replica reports a policy load's revision
// (to WaitRevision, and to the loader as its answer) only once its server
// has the policy, so a check that waits for the revision is decided by it.
func TestPolicyBeforeRevision(t *testing.T) {
	ns := natstest.Start(t, 1)
	slow := func(done *atomic.Bool) func(context.Context, cluster.Policy) error {
		return func(context.Context, cluster.Policy) error {
			time.Sleep(300 * time.Millisecond) // a server compiling the bundle
			done.Store(true)
			return nil
		}
	}
	var aDone, bDone atomic.Bool
	cfg := cluster.Config{URLs: ns.URLs(), SnapshotInterval: -1}
	acfg, bcfg := cfg, cfg
	acfg.OnPolicy, bcfg.OnPolicy = slow(&aDone), slow(&bDone)
	a := newReplica(t, acfg, "")
	b := newReplica(t, bcfg, "")
	waitFollowing(t, a)
	waitFollowing(t, b)
	ctx := ctxT(t, 20*time.Second)
	rev, err := a.LoadPolicy(ctx, []byte("policy bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if !aDone.Load() {
		t.Fatal("LoadPolicy answered before the loading replica's server had the policy")
	}
	if err := b.WaitRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if !bDone.Load() {
		t.Fatal("WaitRevision returned before the replica's server had the policy")
	}
}

// TestPolicy: a bundle loaded on one replica reaches every replica's
// callback, in log order, and a replica bootstrapped from a snapshot has it.
func TestPolicy(t *testing.T) {
	ns := natstest.Start(t, 1)
	type got struct {
		mu  sync.Mutex
		all []cluster.Policy
	}
	var gb got
	cfg := cluster.Config{URLs: ns.URLs(), SnapshotInterval: -1}
	a := newReplica(t, cfg, "")
	bcfg := cfg
	bcfg.OnPolicy = func(_ context.Context, p cluster.Policy) error {
		gb.mu.Lock()
		defer gb.mu.Unlock()
		gb.all = append(gb.all, p)
		if bytes.Equal(p.Bundle, []byte("refuse me")) {
			return errors.New("not a bundle")
		}
		return nil
	}
	b := newReplica(t, bcfg, "")
	waitFollowing(t, a)
	waitFollowing(t, b)
	if _, err := a.Policy(context.Background()); !errors.Is(err, cluster.ErrNoPolicy) {
		t.Fatalf("Policy before any load = %v", err)
	}
	ctx := ctxT(t, 20*time.Second)
	bundle := bytes.Repeat([]byte("policy bytes "), 10000)
	rev, err := a.LoadPolicy(ctx, bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{a, b} {
		if err := r.WaitRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
		p, err := r.Policy(ctx)
		if err != nil || p.Revision != rev || !bytes.Equal(p.Bundle, bundle) {
			t.Fatalf("Policy = rev %d, %d bytes, %v; want rev %d", p.Revision, len(p.Bundle), err, rev)
		}
	}
	if _, err := a.LoadPolicy(ctx, []byte("refuse me")); err != nil {
		t.Fatal(err)
	}
	rev2, err := a.LoadPolicy(ctx, bundle) // the same bundle again: a new entry, one object
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitRevision(ctx, rev2); err != nil {
		t.Fatal(err)
	}
	// The callback has run for a revision once the replica reports it.
	gb.mu.Lock()
	seen := slices.Clone(gb.all)
	gb.mu.Unlock()
	if len(seen) != 3 || !bytes.Equal(seen[0].Bundle, bundle) || seen[0].Revision != rev || seen[2].Revision != rev2 {
		t.Fatalf("b's callback saw %d policies by revision %d", len(seen), rev2)
	}
	if n := counter(t, b, "nexus_cluster_policy_load_errors_total"); n != 1 {
		t.Fatalf("policy load errors = %v, want 1 (the refused bundle)", n)
	}

	if _, err := a.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	var cgot []cluster.Policy
	ccfg := cfg
	ccfg.OnPolicy = func(_ context.Context, p cluster.Policy) error { cgot = append(cgot, p); return nil }
	c := newReplica(t, ccfg, "")
	waitFollowing(t, c)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := c.Policy(ctx)
	if err != nil || p.Revision != rev2 || !bytes.Equal(p.Bundle, bundle) {
		t.Fatalf("new replica Policy = rev %d, %v; want %d", p.Revision, err, rev2)
	}
	if len(cgot) != 1 || cgot[0].Revision != rev2 {
		t.Fatalf("new replica's callback saw %d policies, want the restored one", len(cgot))
	}
}

// TestForeignWrite: a store written directly, not through the log, stops
// following the log (reads go on, writes are refused) instead of skipping
// entries in silence.
func TestForeignWrite(t *testing.T) {
	ns := natstest.Start(t, 1)
	cfg := cluster.Config{URLs: ns.URLs(), SnapshotInterval: -1}
	a := newReplica(t, cfg, "")
	b := newReplica(t, cfg, "")
	waitFollowing(t, a)
	waitFollowing(t, b)
	mustSchema(t, a, testSchema)
	converge(t, writeN(t, a, "x", 2), a, b)
	ctx := ctxT(t, 20*time.Second)
	if _, err := b.store.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:local#viewer@user:ann")}); err != nil {
		t.Fatal(err)
	}
	writeN(t, a, "y", 1)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.Status().Reason, "written outside the cluster") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if st := b.Status(); !st.Degraded || !strings.Contains(st.Reason, "written outside the cluster") {
		t.Fatalf("b status %+v, want diverged", st)
	}
	if _, err := b.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:z#viewer@user:z")}); !errors.Is(err, cluster.ErrDiverged) {
		t.Fatalf("b write = %v, want ErrDiverged", err)
	}
	if ok, err := fixture.CheckText(ctx, b.store, "doc:x-1", "read", "user:u1"); err != nil || !ok {
		t.Fatalf("b read: %v, %v", ok, err)
	}
}

// TestPeriodicSnapshots: a replica snapshots by itself when its revision
// moved, and only the newest SnapshotsKept stay in the bucket.
func TestPeriodicSnapshots(t *testing.T) {
	ns := natstest.Start(t, 1)
	a := newReplica(t, cluster.Config{URLs: ns.URLs(), SnapshotInterval: 100 * time.Millisecond, SnapshotsKept: 2}, "")
	waitFollowing(t, a)
	mustSchema(t, a, testSchema)
	for round := range 4 {
		rev := writeN(t, a, fmt.Sprintf("r%d", round), 2)
		deadline := time.Now().Add(10 * time.Second)
		for a.Status().SnapshotRevision < rev && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if st := a.Status(); st.SnapshotRevision != rev || st.SnapshotAge > 5*time.Second {
			t.Fatalf("round %d: snapshot at %d (age %v), want %d", round, st.SnapshotRevision, st.SnapshotAge, rev)
		}
	}
	nc, err := nats.Connect(ns.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(ctxT(t, 5*time.Second), "nexus-test")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, oi := range infos {
		names = append(names, oi.Name)
	}
	if len(names) != 2 {
		t.Fatalf("bucket holds %v, want the 2 newest snapshots", names)
	}
}
