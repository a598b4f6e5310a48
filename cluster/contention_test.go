package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// casStep is one accepted compare-and-set: key's owner went from from to
// to at rev.
type casStep struct {
	key, from, to string
	rev           datastore.Revision
}

// TestContention runs compare-and-set writes from four replicas at once
// on two keys, with the retry budget at its lowest (MaxRetries 1): each
// write replaces doc:kN's single owner, on the precondition that the owner
// is the one its replica last read. Every write either lands or fails
// with ErrContention (its budget of conflicts spent) or
// ErrPreconditionFailed (the owner had changed); nothing else. The
// changelog then shows that exactly the accepted writes applied, each
// once, at the revision it returned, and that each found the owner its
// precondition named: per key the steps form one chain, with no lost
// update. The conflict and retry counters account for the failures.
func TestContention(t *testing.T) {
	ns := natstest.Start(t, 1)
	rs := startReplicas(t, ns, 4, cluster.Config{MaxRetries: 1})
	mustSchema(t, rs[0], testSchema)
	const keys, writers, perWriter = 2, 2, 50
	ctx := ctxT(t, 3*time.Minute)
	var init []string
	for k := range keys {
		init = append(init, fmt.Sprintf("doc:k%d#owner@user:init", k))
	}
	start, err := rs[0].Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, init...)})
	if err != nil {
		t.Fatal(err)
	}
	converge(t, start, rs...)

	var (
		mu         sync.Mutex
		steps      []casStep
		contention = make([]int, len(rs))
		refused    int
		wg         sync.WaitGroup
	)
	errc := make(chan error, len(rs)*writers)
	for i, r := range rs {
		for w := range writers {
			me := fmt.Sprintf("r%dw%d", i, w)
			wg.Go(func() {
				for j := range perWriter {
					key := fmt.Sprintf("k%d", (j+w)%keys)
					owners, err := r.store.Read(ctx, datastore.Filter{ObjectType: "doc", ObjectID: key, Relation: "owner"})
					if err != nil || len(owners) != 1 {
						errc <- fmt.Errorf("%s: owners of %s on its replica: %v %v", me, key, owners, err)
						return
					}
					from, to := owners[0].Subject.ID, fmt.Sprintf("%s-%d", me, j)
					rev, err := r.Write(ctx, datastore.WriteRequest{
						Preconditions: []datastore.Precondition{{MustExist: true, Filter: datastore.Filter{ObjectType: "doc", ObjectID: key, Relation: "owner", SubjectType: "user", SubjectID: from}}},
						Deletes:       fixture.Tuples(t, "doc:"+key+"#owner@user:"+from),
						Touches:       fixture.Tuples(t, "doc:"+key+"#owner@user:"+to),
					})
					mu.Lock()
					switch {
					case err == nil:
						steps = append(steps, casStep{key: key, from: from, to: to, rev: rev})
					case errors.Is(err, cluster.ErrContention):
						contention[i]++
					case errors.Is(err, datastore.ErrPreconditionFailed):
						refused++
					default:
						errc <- fmt.Errorf("%s write %d: %w", me, j, err)
					}
					mu.Unlock()
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
	last := start
	for _, s := range steps {
		last = max(last, s.rev)
	}
	converge(t, last, rs...)

	// The changelog: each revision after start replaced one owner, and
	// was an accepted write's.
	byRev := map[datastore.Revision]casStep{}
	for _, s := range steps {
		if _, dup := byRev[s.rev]; dup {
			t.Fatalf("two accepted writes returned revision %d", s.rev)
		}
		byRev[s.rev] = s
	}
	head := map[string]string{}
	for k := range keys {
		head[fmt.Sprintf("k%d", k)] = "init"
	}
	applied := 0
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for cs, err := range rs[1].store.Watch(wctx, start) {
		if err != nil {
			t.Fatal(err)
		}
		s, ok := byRev[cs.Revision]
		if !ok {
			if len(cs.Changes) > 0 {
				t.Fatalf("revision %d changed %v, but no accepted write returned it (a failed write applied?)", cs.Revision, cs.Changes)
			}
		} else {
			want := []datastore.Change{
				{Op: datastore.OpDelete, Tuple: fixture.Tuples(t, "doc:"+s.key+"#owner@user:"+s.from)[0]},
				{Op: datastore.OpTouch, Tuple: fixture.Tuples(t, "doc:"+s.key+"#owner@user:"+s.to)[0]},
			}
			if len(cs.Changes) != 2 || !slices.Contains(cs.Changes, want[0]) || !slices.Contains(cs.Changes, want[1]) {
				t.Fatalf("revision %d changed %v, want %v", cs.Revision, cs.Changes, want)
			}
			if head[s.key] != s.from {
				t.Fatalf("revision %d replaced %s's owner %s, but the owner then was %s: a precondition did not hold at apply time", cs.Revision, s.key, s.from, head[s.key])
			}
			head[s.key] = s.to
			applied++
		}
		if cs.Revision >= last {
			break
		}
	}
	if applied != len(steps) {
		t.Fatalf("%d accepted writes, %d found in the changelog", len(steps), applied)
	}
	for key, owner := range head {
		got, err := rs[2].store.Read(ctx, datastore.Filter{ObjectType: "doc", ObjectID: key, Relation: "owner"})
		if err != nil || len(got) != 1 || got[0].Subject.ID != owner {
			t.Fatalf("%s owners %v (%v), want only %s", key, got, err, owner)
		}
	}

	total := 0
	for i, r := range rs {
		conflicts, retries := counter(t, r, "nexus_cluster_conflicts_total"), counter(t, r, "nexus_cluster_retries_total")
		// A write that fails with ErrContention met MaxRetries+1
		// conflicts, and was published again after each but the last.
		if conflicts < float64(2*contention[i]) || retries < conflicts-float64(contention[i]) {
			t.Errorf("replica %d: %d writes failed with ErrContention, but conflicts_total %v and retries_total %v", i, contention[i], conflicts, retries)
		}
		if st := r.Status(); st.Rejected != 0 {
			t.Errorf("replica %d rejected %d entries at apply time", i, st.Rejected)
		}
		total += contention[i]
	}
	t.Logf("%d writes: %d accepted, %d ErrContention, %d ErrPreconditionFailed", len(rs)*writers*perWriter, len(steps), total, refused)
	if total == 0 || len(steps) == 0 {
		t.Errorf("%d accepted, %d ErrContention: the test did not exercise both outcomes", len(steps), total)
	}
}
