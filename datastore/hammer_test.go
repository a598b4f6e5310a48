package datastore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// TestHammer runs checks, role reads, writes, schema writes and a watcher
// at once; run with -race. Answers about tuples nobody writes must stay
// right throughout.
func TestHammer(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
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
				for _, c := range DriveCases {
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

// TestSharedSnapshotHammer holds the shared read snapshot (snapshot.go)
// to its claim: many goroutines check and read roles on one bbolt read
// transaction at once, while writes retire it and publish the next. Run
// with -race: the race detector sees every Go object the goroutines share
// (the transaction, its buckets, their statistics), and bbolt maps the
// file's pages read-only, so nobody can write them. Without writes, the
// test also shows that one transaction served every check.
func TestSharedSnapshotHammer(t *testing.T) {
	s := openTemp(t, datastore.Config{})
	MustDrive(t, s)
	for _, writes := range []int{0, 20} {
		t.Run(fmt.Sprintf("writes=%d", writes), func(t *testing.T) {
			before := s.ReadTxCount()
			checks := hammerSnapshot(t, s, writes)
			txs := s.ReadTxCount() - before
			t.Logf("%d checks and role reads on %d read transactions", checks, txs)
			if writes == 0 && txs > 1 {
				t.Fatalf("%d read transactions for %d checks: the snapshot was not shared", txs, checks)
			}
		})
	}
}

// hammerSnapshot runs checks and role reads on 8 goroutines while another
// makes writes Writes, and returns how many reads ran.
func hammerSnapshot(t *testing.T, s *datastore.BoltStore, writes int) int64 {
	ctx := context.Background()
	const readers, rounds = 8, 100
	var wg sync.WaitGroup
	var reads atomic.Int64
	errs := make(chan error, readers+1)
	for range readers {
		wg.Go(func() {
			var dst []string
			for range rounds {
				for _, c := range DriveCases {
					got, err := fixture.CheckText(ctx, s, c.Object, c.Permission, c.Subject)
					if err != nil || got != c.Want {
						errs <- fmt.Errorf("%s#%s@%s = %v, %v; want %v", c.Object, c.Permission, c.Subject, got, err, c.Want)
						return
					}
					reads.Add(1)
				}
				var err error
				dst, err = s.AppendRoles(ctx, dst[:0], api.Subject{Type: "user", ID: "alice"}, "acme")
				if err != nil || len(dst) != 1 || dst[0] != "admin" {
					errs <- fmt.Errorf("roles = %v, %v", dst, err)
					return
				}
				reads.Add(1)
			}
		})
	}
	wg.Go(func() {
		for i := range writes {
			tu := api.Tuple{Object: api.Object{Type: "folder", ID: fmt.Sprintf("s%d", i)}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "s"}}
			if _, err := s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}}); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return reads.Load()
}
