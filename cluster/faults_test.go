package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// has reports whether the replica's store holds tuple.
func has(t *testing.T, r *replica, object, relation, subject string) bool {
	t.Helper()
	ok, err := fixture.CheckText(context.Background(), r.store, object, relation, subject)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// syncAll waits until every replica applied the whole log.
func syncAll(t *testing.T, rs ...*replica) {
	t.Helper()
	for i, r := range rs {
		if err := r.Sync(ctxT(t, 30*time.Second)); err != nil {
			t.Fatalf("replica %d sync: %v", i, err)
		}
	}
}

// TestWriteID: a write repeated with the same write ID (a client's retry,
// on the same replica or another) gets the first outcome and is applied
// once, even after the tuple changed in between.
func TestWriteID(t *testing.T) {
	ns := natstest.Start(t, 1)
	rs := startReplicas(t, ns, 2, cluster.Config{})
	a, b := rs[0], rs[1]
	mustSchema(t, a, testSchema)
	ctx := api.WithWriteID(ctxT(t, 30*time.Second), "grant-eve-1")
	grant := datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:x#viewer@user:eve")}
	rev, err := a.Write(ctx, grant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctxT(t, 30*time.Second), datastore.WriteRequest{Deletes: grant.Touches}); err != nil {
		t.Fatal(err)
	}
	syncAll(t, a, b)
	for i, r := range []*replica{a, b} {
		again, err := r.Write(ctx, grant)
		if err != nil || again != rev {
			t.Fatalf("replica %d: retry = %d, %v; want the first outcome %d", i, again, err, rev)
		}
	}
	// A copy that reaches the log anyway (published by hand) is recorded
	// without effect on every replica.
	publishRaw(t, ns, "grant-eve-1", time.Now().Add(time.Minute), `{"v":1,"kind":"write","touches":["doc:x#viewer@user:eve"]}`)
	last := writeEventually(t, b, datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:y#viewer@user:ann")}, 30*time.Second)
	converge(t, last, a, b)
	if has(t, a, "doc:x", "read", "user:eve") || has(t, b, "doc:x", "read", "user:eve") {
		t.Fatal("a write applied twice under one write ID: the revoke was undone")
	}
	// A refused write's retry is refused the same way.
	claim := datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:y#owner@user:bob"),
		Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "doc", ObjectID: "y"}}}}
	cctx := api.WithWriteID(ctxT(t, 30*time.Second), "claim-y")
	if _, err := a.Write(cctx, claim); !errors.Is(err, datastore.ErrPreconditionFailed) {
		t.Fatalf("claim = %v, want ErrPreconditionFailed", err)
	}
}

// publishRaw appends a write entry to the log by hand, with the headers a
// replica sets.
func publishRaw(t *testing.T, ns *natstest.Cluster, id string, deadline time.Time, body string) uint64 {
	t.Helper()
	nc, err := nats.Connect(ns.URLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	msg := &nats.Msg{Subject: "nexus.test.log", Data: []byte(body), Header: nats.Header{}}
	msg.Header.Set("Nexus-Write-Id", id)
	msg.Header.Set("Nexus-Deadline", fmt.Sprint(deadline.UnixNano()))
	ack, err := js.PublishMsg(ctxT(t, 10*time.Second), msg, jetstream.WithMsgID(fmt.Sprintf("%s@%d", id, deadline.UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestDeadlineSkip: an entry the log took after its deadline is recorded
// without effect on every replica, the ones started later from the log
// included.
func TestDeadlineSkip(t *testing.T) {
	ns := natstest.Start(t, 1)
	rs := startReplicas(t, ns, 2, cluster.Config{})
	mustSchema(t, rs[0], testSchema)
	late := publishRaw(t, ns, "late-1", time.Now().Add(-time.Second), `{"v":1,"kind":"write","touches":["doc:late#viewer@user:eve"]}`)
	inTime := publishRaw(t, ns, "ontime-1", time.Now().Add(time.Minute), `{"v":1,"kind":"write","touches":["doc:ontime#viewer@user:eve"]}`)
	fresh := startReplicas(t, ns, 1, cluster.Config{})[0]
	all := append(rs, fresh)
	converge(t, datastore.Revision(max(late, inTime)), all...)
	for i, r := range all {
		if has(t, r, "doc:late", "read", "user:eve") {
			t.Fatalf("replica %d applied an entry the log took after its deadline", i)
		}
		if !has(t, r, "doc:ontime", "read", "user:eve") {
			t.Fatalf("replica %d skipped an entry in time", i)
		}
	}
}

// TestNotWrittenNeverApplies is the stalled-server case: a write whose
// publish is held by a stalled NATS connection gets no "written" answer,
// another replica then revokes the same tuple, and when the stall ends
// and the held publish reaches the log, no replica applies it.
func TestNotWrittenNeverApplies(t *testing.T) {
	ns := natstest.Start(t, 1)
	proxy := newStallProxy(t, ns.URLs()[0][len("nats://"):])
	b := startReplicas(t, ns, 1, cluster.Config{})[0]
	a := newReplica(t, cluster.Config{URLs: []string{proxy.URL()}, WriteTimeout: 2 * time.Second, MaxWait: 15 * time.Second}, "")
	waitFollowing(t, a)
	mustSchema(t, b, testSchema)
	syncAll(t, a)

	proxy.stall()
	_, err := a.Write(context.Background(), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:x#viewer@user:eve")})
	switch {
	case err == nil:
		t.Fatal("a write through a stalled server answered written")
	case errors.Is(err, cluster.ErrOutcomeUnknown), errors.Is(err, cluster.ErrUnavailable):
		t.Logf("answer while stalled: %v", err)
	default:
		t.Fatalf("write through a stalled server = %v, want unknown or not written", err)
	}
	if _, err := b.Write(ctxT(t, 30*time.Second), datastore.WriteRequest{Deletes: fixture.Tuples(t, "doc:x#viewer@user:eve")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past the write's deadline
	proxy.unstall()
	// The held publish reaches the log late; wait until a has caught up.
	deadline := time.Now().Add(30 * time.Second)
	for a.Status().Degraded && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	last := writeEventually(t, b, datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:after#viewer@user:ann")}, 30*time.Second)
	converge(t, last, a, b)
	for i, r := range []*replica{a, b} {
		if has(t, r, "doc:x", "read", "user:eve") {
			t.Fatalf("replica %d applied the stalled write after the revoke", i)
		}
	}
}

// TestStalledServer: with the NATS server a replica is connected to
// stalled, its writes go through another server within seconds.
func TestStalledServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	ns := natstest.Start(t, 3)
	var proxies []*stallProxy
	var urls []string
	for _, u := range ns.URLs() {
		p := newStallProxy(t, u[len("nats://"):])
		proxies, urls = append(proxies, p), append(urls, p.URL())
	}
	r := newReplica(t, cluster.Config{URLs: urls, StreamReplicas: 3, MaxWait: 15 * time.Second}, "")
	waitFollowing(t, r)
	mustSchema(t, r, testSchema)
	stalled := -1
	for i, p := range proxies {
		if p.active() {
			stalled = i
			p.stall()
			break
		}
	}
	if stalled < 0 {
		t.Fatal("no connection through the proxies")
	}
	took := resumeWrites(t, r, "stall")
	t.Logf("writes resumed %v after the server stalled", took.Round(100*time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("writes resumed only after %v", took)
	}
}

// TestKilledServer: with the NATS server a replica is connected to gone,
// its writes go through another within seconds.
func TestKilledServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	ns := natstest.Start(t, 3)
	r := startReplicas(t, ns, 1, cluster.Config{WriteTimeout: 5 * time.Second})[0]
	mustSchema(t, r, testSchema)
	ns.Stop(streamLeader(t, ns, "nexus-test"))
	took := resumeWrites(t, r, "kill")
	t.Logf("writes resumed %v after the stream leader's server stopped", took.Round(100*time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("writes resumed only after %v", took)
	}
}

// resumeWrites writes until one is written and returns how long it took.
func resumeWrites(t *testing.T, r *replica, prefix string) time.Duration {
	t.Helper()
	start := time.Now()
	for i := 0; ; i++ {
		_, err := r.Write(context.Background(), datastore.WriteRequest{Touches: fixture.Tuples(t, fmt.Sprintf("doc:%s-%d#viewer@user:ann", prefix, i))})
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("writes did not resume in a minute: %v (status %+v)", err, r.Status())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestQuorumLost: with two of three NATS servers gone, the replica says
// writes are unavailable within seconds (checks go on), and available
// again once they are back.
func TestQuorumLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	ns := natstest.Start(t, 3)
	r := startReplicas(t, ns, 1, cluster.Config{})[0]
	mustSchema(t, r, testSchema)
	if _, err := r.Write(ctxT(t, 30*time.Second), datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:q#viewer@user:ann")}); err != nil {
		t.Fatal(err)
	}
	leader := streamLeader(t, ns, "nexus-test")
	start := time.Now()
	for i := range 3 {
		if i != leader {
			ns.Stop(i) // the leader stays, alone
		}
	}
	for !r.Status().Degraded {
		if time.Since(start) > time.Minute {
			t.Fatalf("writes still said available a minute after quorum loss: %+v", r.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("writes unavailable %v after quorum loss: %s", took.Round(100*time.Millisecond), r.Status().Reason)
	// The status and the gauge are read at different instants, and a
	// reconnect to the lone server clears the reason until the next probe
	// (a second): the gauge must follow within a few probes.
	for counter(t, r, "nexus_cluster_writes_available") != 0 {
		if time.Since(start) > time.Minute {
			t.Fatal("nexus_cluster_writes_available is not 0 a minute after quorum loss")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !has(t, r, "doc:q", "read", "user:ann") {
		t.Fatal("checks stopped with the quorum")
	}
	ns.RestartAll(t)
	back := time.Now()
	waitFollowing(t, r)
	resumeWrites(t, r, "back")
	t.Logf("writes back %v after the servers returned", time.Since(back).Round(100*time.Millisecond))
	if took > 30*time.Second {
		t.Fatalf("writes said available for %v after quorum loss", took)
	}
}

// TestAutoStreamReplicas: with no stream replicas configured, a replica
// creates the log on as many NATS servers as the cluster has (at most 3),
// not on one.
func TestAutoStreamReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	ns := natstest.Start(t, 3)
	r := newReplica(t, cluster.Config{URLs: ns.URLs()[:1]}, "")
	waitFollowing(t, r)
	nc, err := nats.Connect(ns.URLs()[1])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctxT(t, 10*time.Second), "nexus-test")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.Replicas; got != 3 {
		t.Fatalf("the log has %d replicas on a 3-node NATS cluster, want 3", got)
	}
}

// TestRetryNotWrittenIsUnknown: a write made with a client's write ID (an
// Idempotency-Key) may be a retry of an attempt still on its way to the
// log, here or on another replica. When its own attempt does not go out,
// its answer is unknown, never "not written"; a write with an ID the
// server made up for it is answered not written.
func TestRetryNotWrittenIsUnknown(t *testing.T) {
	ns := natstest.Start(t, 1)
	r := startReplicas(t, ns, 1, cluster.Config{WriteTimeout: 2 * time.Second})[0]
	mustSchema(t, r, testSchema)
	grant := datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:k#viewer@user:eve")}
	ns.StopAll()
	_, err := r.Write(api.WithWriteID(ctxT(t, 30*time.Second), "client-key-1"), grant)
	if !errors.Is(err, cluster.ErrOutcomeUnknown) || errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("write with a client's ID while NATS is down = %v, want unknown only", err)
	}
	_, err = r.Write(api.WithNewWriteID(ctxT(t, 30*time.Second), "server-made-1"), grant)
	if !errors.Is(err, cluster.ErrUnavailable) {
		t.Fatalf("write with a new ID while NATS is down = %v, want not written", err)
	}
	ns.RestartAll(t)
	waitFollowing(t, r)
	var rev datastore.Revision
	deadline := time.Now().Add(30 * time.Second)
	for {
		rev, err = r.Write(api.WithWriteID(ctxT(t, 30*time.Second), "client-key-1"), grant)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("retry once NATS is back: %v", err)
	}
	again, err := r.Write(api.WithWriteID(ctxT(t, 30*time.Second), "client-key-1"), grant)
	if err != nil || again != rev {
		t.Fatalf("second retry = %d, %v; want the first outcome %d", again, err, rev)
	}
}
