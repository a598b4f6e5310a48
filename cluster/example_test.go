package cluster_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// Two replicas on one NATS server: a write on one, a consistency token
// on the other, a check answered from the other's own store.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "nexus-cluster-example")
	defer os.RemoveAll(dir)
	ns, err := natstest.New(1, filepath.Join(dir, "nats")) // a real nats-server, in process
	if err != nil {
		panic(err)
	}
	defer ns.StopAll()

	open := func(name string) (*cluster.Replica, *datastore.BoltStore) {
		store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, name+".db")})
		if err != nil {
			panic(err)
		}
		r, err := cluster.New(ctx, cluster.Config{URLs: ns.URLs(), Name: "example", Store: store})
		if err != nil {
			panic(err)
		}
		if err := r.Sync(ctx); err != nil { // caught up with the log
			panic(err)
		}
		return r, store
	}
	a, storeA := open("a")
	b, storeB := open("b")
	defer storeA.Close()
	defer storeB.Close()
	defer a.Close()
	defer b.Close()

	sc, _ := schema.Parse([]byte("types:\n  user: {}\n  doc:\n    relations:\n      viewer: [user]\n"))
	if _, err := a.WriteSchema(ctx, sc, false); err != nil {
		panic(err)
	}
	t, _ := api.ParseTuple("doc:readme#viewer@user:ann")
	rev, err := a.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{t}})
	if err != nil {
		panic(err)
	}
	fmt.Println("written at revision", rev)

	if err := b.WaitRevision(ctx, rev); err != nil { // the token, on the other replica
		panic(err)
	}
	ok, _ := fixture.CheckText(ctx, storeB, "doc:readme", "viewer", "user:ann")
	fmt.Println("b sees it:", ok)
	// Output:
	// written at revision 2
	// b sees it: true
}
