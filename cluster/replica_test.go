package cluster_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

func TestWriteReplicates(t *testing.T) {
	nats := natstest.Start(t, 1)
	a := newReplica(t, cluster.Config{URLs: nats.URLs()}, "")
	b := newReplica(t, cluster.Config{URLs: nats.URLs()}, "")
	waitFollowing(t, a)
	waitFollowing(t, b)

	rev := mustSchema(t, a, testSchema)
	if rev != 1 {
		t.Fatalf("first schema at revision %d, want 1", rev)
	}
	ctx := ctxT(t, 20*time.Second)
	rev, err := a.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:d1#owner@user:ann", "doc:d1#viewer@user:bob")})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Revision(); got != rev {
		t.Fatalf("writer at %d after its write returned %d: no read-your-writes", got, rev)
	}
	// A consistency token: B waits for the revision A returned.
	if err := b.WaitRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if ok, err := fixture.CheckText(ctx, b.store, "doc:d1", "read", "user:bob"); err != nil || !ok {
		t.Fatalf("B check = %v, %v", ok, err)
	}
	converge(t, rev, a, b)

	// Preconditions, checked against the state the entry applies to.
	_, err = b.Write(ctx, datastore.WriteRequest{
		Touches:       fixture.Tuples(t, "doc:d2#owner@user:bob"),
		Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "doc", ObjectID: "d2"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Write(ctx, datastore.WriteRequest{
		Touches:       fixture.Tuples(t, "doc:d2#owner@user:ann"),
		Preconditions: []datastore.Precondition{{Filter: datastore.Filter{ObjectType: "doc", ObjectID: "d2"}}},
	})
	if !errors.Is(err, datastore.ErrPreconditionFailed) {
		t.Fatalf("second claim of doc:d2 = %v, want ErrPreconditionFailed", err)
	}
	if _, err := a.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "doc:d2#editor@user:ann")}); !errors.Is(err, datastore.ErrInvalidTuple) {
		t.Fatalf("invalid tuple = %v, want ErrInvalidTuple", err)
	}

	// A write larger than one NATS message (1 MiB here) is refused before it is sent.
	big := datastore.WriteRequest{}
	for i := range 40000 {
		big.Touches = append(big.Touches, fixture.Tuples(t, fmt.Sprintf("doc:big-%d#viewer@user:u%d", i, i))...)
	}
	if _, err := a.Write(ctx, big); !errors.Is(err, cluster.ErrTooLarge) {
		t.Fatalf("a write of 40,000 tuples = %v, want ErrTooLarge", err)
	}

	// A token from the future fails closed after MaxWait.
	err = b.WaitRevision(ctx, b.Revision()+100)
	var re *cluster.RevisionError
	if !errors.As(err, &re) || !errors.Is(err, cluster.ErrRevisionTimeout) {
		t.Fatalf("future revision = %v, want a RevisionError", err)
	}
	if st := a.Status(); st.Rejected != 0 || st.Degraded || st.LagMessages != 0 {
		t.Fatalf("status %+v", st)
	}
}
