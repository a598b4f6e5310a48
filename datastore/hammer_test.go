package datastore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/internal/storetest"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// TestHammer runs checks, role reads, writes, schema writes and a watcher
// at once; run with -race. Answers about tuples nobody writes must stay
// right throughout.
func TestHammer(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	storetest.MustDrive(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc, _ := s.Schema(ctx)
	var wg sync.WaitGroup
	var checks atomic.Int64
	fail := make(chan string, 1)
	report := func(msg string) {
		select {
		case fail <- msg:
		default:
		}
	}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []string
			for ctx.Err() == nil {
				for _, c := range storetest.DriveCases {
					got, err := fixture.CheckText(ctx, s, c.Object, c.Permission, c.Subject)
					if err != nil && ctx.Err() == nil {
						report(err.Error())
						return
					}
					if err == nil && got != c.Want {
						report(fmt.Sprintf("%s#%s@%s = %v", c.Object, c.Permission, c.Subject, got))
						return
					}
					checks.Add(1)
				}
				var err error
				dst, err = s.AppendRoles(ctx, dst[:0], api.Subject{Type: "user", ID: "alice"}, "acme")
				if err == nil && (len(dst) != 1 || dst[0] != "admin") {
					report(fmt.Sprintf("roles %v", dst))
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for cs, err := range s.Watch(ctx, 0) {
			if err != nil || cs.Revision == 0 {
				return
			}
		}
	}()
	for i := range 60 {
		tu := api.Tuple{Object: api.Object{Type: "folder", ID: fmt.Sprintf("h%d", i)}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "h"}}
		if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}}); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			if _, err := s.WriteSchema(ctx, sc, false); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := fixture.CheckText(ctx, s, tu.Object.String(), "read", "user:h"); err != nil || !ok {
			t.Fatalf("read-your-write: %v %v", ok, err)
		}
	}
	cancel()
	wg.Wait()
	select {
	case msg := <-fail:
		t.Fatal(msg)
	default:
	}
	if checks.Load() == 0 {
		t.Fatal("no checks ran")
	}
}
