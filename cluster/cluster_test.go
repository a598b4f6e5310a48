package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// startReplicas starts n replicas on the NATS servers and waits until they
// follow the log.
func startReplicas(t *testing.T, ns *natstest.Cluster, n int, cfg cluster.Config) []*replica {
	t.Helper()
	cfg.URLs = ns.URLs()
	if cfg.StreamReplicas == 0 {
		cfg.StreamReplicas = ns.Len()
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.MaxWait == 0 {
		// Tokens are checked right after each write; a machine busy with
		// other test packages can leave a replica more than the default
		// 2s behind, which would be a slow machine, not a wrong answer.
		cfg.MaxWait = 15 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	var rs []*replica
	for range n {
		rs = append(rs, newReplica(t, cfg, ""))
	}
	for _, r := range rs {
		waitFollowing(t, r)
	}
	return rs
}

// stormResult is what a write storm did.
type stormResult struct {
	mu      sync.Mutex
	last    datastore.Revision
	claims  map[string][]string // doc -> the claimants whose claim was accepted
	refused int                 // claims refused with ErrPreconditionFailed
	writes  int
}

func (s *stormResult) saw(rev datastore.Revision) {
	s.mu.Lock()
	s.last = max(s.last, rev)
	s.writes++
	s.mu.Unlock()
}

// storm runs writers goroutines on every replica, each making perWriter
// writes: plain touches and deletes of its own tuples, and claims of shared
// documents (touch doc:cN#owner@user:W only if doc:cN has no owner) that
// conflict across replicas. After each accepted write another replica waits
// for its revision (a consistency token) and must see it.
func storm(t *testing.T, rs []*replica, writers, perWriter, docs int) *stormResult {
	t.Helper()
	res := &stormResult{claims: map[string][]string{}}
	ctx := ctxT(t, 5*time.Minute)
	var wg sync.WaitGroup
	errc := make(chan error, len(rs)*writers)
	for i, r := range rs {
		other := rs[(i+1)%len(rs)]
		for w := range writers {
			me := fmt.Sprintf("w%d-%d", i, w)
			wg.Go(func() {
				for j := range perWriter {
					var req datastore.WriteRequest
					var doc, see string
					switch j % 3 {
					case 0: // a claim
						doc = fmt.Sprintf("c%d", (j/3)%docs)
						req = datastore.WriteRequest{
							Touches:       fixture.Tuples(t, "doc:"+doc+"#owner@user:"+me),
							Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "doc", ObjectID: doc, Relation: "owner"}}},
						}
						see = "doc:" + doc + "#owner@user:" + me
					case 1:
						see = fmt.Sprintf("doc:%s-%d#viewer@user:u%d", me, j, j)
						req = datastore.WriteRequest{Touches: fixture.Tuples(t, see)}
					case 2: // delete the previous touch, add another
						see = fmt.Sprintf("doc:%s-%d#viewer@user:u%d", me, j, j)
						req = datastore.WriteRequest{
							Touches: fixture.Tuples(t, see),
							Deletes: fixture.Tuples(t, fmt.Sprintf("doc:%s-%d#viewer@user:u%d", me, j-1, j-1)),
						}
					}
					rev, err := r.Write(ctx, req)
					if doc != "" && errors.Is(err, datastore.ErrPreconditionFailed) {
						res.mu.Lock()
						res.refused++
						res.mu.Unlock()
						continue
					}
					if err != nil {
						errc <- fmt.Errorf("%s write %d: %w", me, j, err)
						return
					}
					if got := r.Revision(); got < rev {
						errc <- fmt.Errorf("%s: writer at %d after its write at %d", me, got, rev)
						return
					}
					res.saw(rev)
					if doc != "" {
						res.mu.Lock()
						res.claims[doc] = append(res.claims[doc], me)
						res.mu.Unlock()
					}
					// The token on another replica.
					if err := other.WaitRevision(ctx, rev); err != nil {
						errc <- fmt.Errorf("%s: token %d on another replica: %w", me, rev, err)
						return
					}
					tu := fixture.Tuples(t, see)[0]
					ok, err := fixture.CheckText(ctx, other.store, tu.Object.String(), tu.Relation, tu.Subject.String())
					if err != nil || !ok {
						errc <- fmt.Errorf("%s: %s not visible on another replica at revision %d: %v, %v", me, see, rev, ok, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return res
}

// checkStorm checks a storm's outcome on converged replicas: one accepted
// claim per document, held in every store, and no entry rejected at apply
// time (every accepted precondition held on the state its entry met).
func checkStorm(t *testing.T, res *stormResult, docs int, rs ...*replica) {
	t.Helper()
	converge(t, res.last, rs...)
	ctx := ctxT(t, 10*time.Second)
	for d := range docs {
		doc := fmt.Sprintf("c%d", d)
		got := res.claims[doc]
		if len(got) != 1 {
			t.Fatalf("doc %s: %d accepted claims %v, want exactly 1", doc, len(got), got)
		}
		owners, err := rs[0].store.Read(ctx, datastore.Filter{ObjectType: "doc", ObjectID: doc, Relation: "owner"})
		if err != nil || len(owners) != 1 || owners[0].Subject.ID != got[0] {
			t.Fatalf("doc %s owners %v (%v), want only %s", doc, owners, err, got[0])
		}
	}
	for i, r := range rs {
		if st := r.Status(); st.Rejected != 0 {
			t.Fatalf("replica %d rejected %d entries at apply time", i, st.Rejected)
		}
	}
	t.Logf("%d writes accepted, %d claims refused, last revision %d", res.writes, res.refused, res.last)
}

func TestConcurrentWritesSingleNode(t *testing.T) {
	ns := natstest.Start(t, 1)
	rs := startReplicas(t, ns, 3, cluster.Config{})
	mustSchema(t, rs[0], testSchema)
	const docs = 5
	res := storm(t, rs, 3, 30, docs)
	checkStorm(t, res, docs, rs...)
	var conflicts float64
	for _, r := range rs {
		conflicts += counter(t, r, "nexus_cluster_conflicts_total")
	}
	if conflicts == 0 {
		t.Errorf("no conflicts in a storm of concurrent writers: the test does not exercise optimistic concurrency")
	}
}

// counter reads a counter or gauge from a replica's registry.
func counter(t testing.TB, r *replica, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// streamLeader returns the index of the node that leads the stream.
func streamLeader(t *testing.T, ns *natstest.Cluster, stream string) int {
	t.Helper()
	nc, err := nats.Connect(ns.URLs()[0] + "," + ns.URLs()[1] + "," + ns.URLs()[2])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctxT(t, 10*time.Second), stream)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || ns.Index(info.Cluster.Leader) < 0 {
		t.Fatalf("no stream leader in %+v", info.Cluster)
	}
	return ns.Index(info.Cluster.Leader)
}

// writeEventually retries a write that fails with ErrUnavailable or
// ErrOutcomeUnknown (a new stream leader being elected) for up to d.
func writeEventually(t *testing.T, r *replica, req datastore.WriteRequest, d time.Duration) datastore.Revision {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		rev, err := r.Write(context.Background(), req)
		if err == nil {
			return rev
		}
		if !errors.Is(err, cluster.ErrUnavailable) && !errors.Is(err, cluster.ErrOutcomeUnknown) || time.Now().After(deadline) {
			t.Fatalf("write: %v (status %+v)", err, r.Status())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestThreeNodeCluster runs three replicas on a 3-node JetStream cluster
// with an R3 stream: a write storm, then the stream leader's node stops
// (writes and checks go on), then every node stops (checks go on, writes
// are refused as degraded) and comes back (both recover), then a new
// replica bootstraps from a snapshot and the log's tail.
func TestThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	ns := natstest.Start(t, 3)
	rs := startReplicas(t, ns, 3, cluster.Config{SnapshotInterval: -1})
	mustSchema(t, rs[0], testSchema)
	const docs = 4
	res := storm(t, rs, 2, 24, docs)
	checkStorm(t, res, docs, rs...)

	t.Run("one node down", func(t *testing.T) {
		leader := streamLeader(t, ns, "nexus-test")
		ns.Stop(leader)
		defer ns.Restart(t, leader)
		var last datastore.Revision
		for i, r := range rs {
			// The first write may wait for a new stream leader.
			last = writeEventually(t, r, datastore.WriteRequest{Touches: fixture.Tuples(t, fmt.Sprintf("doc:n1-%d#viewer@user:ann", i))}, 30*time.Second)
		}
		for i, r := range rs {
			for j := range 5 {
				rev, err := r.Write(ctxT(t, 20*time.Second), datastore.WriteRequest{Touches: fixture.Tuples(t, fmt.Sprintf("doc:n1-%d-%d#viewer@user:bob", i, j))})
				if err != nil {
					t.Fatalf("replica %d write %d with one node down: %v", i, j, err)
				}
				last = max(last, rev)
			}
		}
		converge(t, last, rs...)
		for i, r := range rs {
			if ok, err := fixture.CheckText(context.Background(), r.store, "doc:n1-0", "read", "user:ann"); err != nil || !ok {
				t.Fatalf("replica %d check with one node down: %v, %v", i, ok, err)
			}
		}
	})

	t.Run("all nodes down", func(t *testing.T) {
		before := rs[0].Revision()
		ns.StopAll()
		for i, r := range rs {
			deadline := time.Now().Add(10 * time.Second)
			for !r.Status().Degraded && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			st := r.Status()
			if !st.Degraded || st.Reason == "" {
				t.Fatalf("replica %d with NATS down: status %+v, want degraded with a reason", i, st)
			}
			start := time.Now()
			_, err := r.Write(context.Background(), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:down#viewer@user:ann")})
			if !errors.Is(err, cluster.ErrUnavailable) {
				t.Fatalf("replica %d write with NATS down = %v, want ErrUnavailable", i, err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("replica %d took %v to refuse a write with NATS down", i, took)
			}
			if ok, err := fixture.CheckText(context.Background(), r.store, "doc:n1-0", "read", "user:ann"); err != nil || !ok {
				t.Fatalf("replica %d check with NATS down: %v, %v", i, ok, err)
			}
			if r.Revision() < before {
				t.Fatalf("replica %d went back from %d to %d", i, before, r.Revision())
			}
			if counter(t, r, "nexus_cluster_degraded") != 1 {
				t.Fatalf("replica %d: nexus_cluster_degraded is not 1", i)
			}
		}
		ns.RestartAll(t)
		var last datastore.Revision
		for i, r := range rs {
			waitFollowing(t, r)
			last = writeEventually(t, r, datastore.WriteRequest{Touches: fixture.Tuples(t, fmt.Sprintf("doc:back-%d#viewer@user:ann", i))}, 30*time.Second)
		}
		converge(t, last, rs...)
	})

	t.Run("bootstrap from a snapshot", func(t *testing.T) {
		ctx := ctxT(t, 60*time.Second)
		snapRev, err := rs[1].Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Again at the same revision: deduplicated.
		if again, err := rs[2].Snapshot(ctx); err != nil || again != snapRev {
			t.Fatalf("second snapshot at the same revision = %d, %v; want %d", again, err, snapRev)
		}
		var last datastore.Revision
		for i := range 5 {
			if last, err = rs[0].Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, fmt.Sprintf("doc:tail-%d#viewer@user:cat", i))}); err != nil {
				t.Fatal(err)
			}
		}
		fresh := startReplicas(t, ns, 1, cluster.Config{SnapshotInterval: -1})[0]
		converge(t, last, append(rs, fresh)...)
		if n := counter(t, fresh, "nexus_cluster_snapshots_total"); n != 1 {
			t.Fatalf("the new replica restored %v snapshots, want 1", n)
		}
		if ok, err := fixture.CheckText(ctx, fresh.store, "doc:tail-4", "read", "user:cat"); err != nil || !ok {
			t.Fatalf("new replica check: %v, %v", ok, err)
		}
	})
}
