package cluster_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// BenchmarkCheckUnderWrites measures the checks one replica answers from
// its store (one goroutine, so that the writes get the other core) while
// the cluster takes no writes, and while another replica is offered 1,000
// single-tuple writes a second that this replica applies; it reports the
// writes this replica applied per second during the measurement. NATS is
// one node: the replicas and NATS share this machine's cores, as they
// would not in production.
func BenchmarkCheckUnderWrites(b *testing.B) {
	for _, rate := range []int{0, 1000} {
		b.Run(fmt.Sprintf("offered-writes=%d/s", rate), func(b *testing.B) {
			rs := benchCluster(b, 1)
			reader, writer := rs[0], rs[1]
			ctx := context.Background()
			seed := benchBatch(1000)
			rev, err := writer.Write(ctx, seed)
			if err != nil {
				b.Fatal(err)
			}
			if err := waitRev(reader, rev, 30*time.Second); err != nil {
				b.Fatal(err)
			}
			stop := make(chan struct{})
			done := make(chan struct{})
			var written atomic.Int64
			go func() {
				defer close(done)
				if rate == 0 {
					<-stop
					return
				}
				tick := time.NewTicker(time.Second / time.Duration(rate))
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						// Asynchronous: the pace is the ticker's, not a
						// write's round trip.
						go func() {
							if _, err := writer.Write(ctx, benchBatch(1)); err == nil {
								written.Add(1)
							}
						}()
					}
				}
			}()
			time.Sleep(200 * time.Millisecond)
			startRev := reader.Revision()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				t := seed.Touches[i%len(seed.Touches)]
				res, err := reader.store.Check(ctx, datastore.CheckRequest{Object: t.Object, Permission: "read", Subject: t.Subject})
				if err != nil || !res.Allowed {
					b.Fatalf("check %v: %v %v", t, res.Allowed, err)
				}
			}
			el := time.Since(start)
			b.StopTimer()
			close(stop)
			<-done
			b.ReportMetric(float64(b.N)/el.Seconds(), "checks/s")
			b.ReportMetric(float64(reader.Revision()-startRev)/el.Seconds(), "applied-writes/s")
		})
	}
}

// BenchmarkRestore measures how long a new replica on an empty data
// directory takes to be caught up (Sync returned) from a snapshot of a
// store of the given size, plus a log tail of 100 writes after it. Run it
// with -benchtime=1x: building the store through the log is most of the
// time and is not measured.
func BenchmarkRestore(b *testing.B) {
	for _, size := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("tuples=%d", size), func(b *testing.B) {
			ns := natstest.Start(b, 1)
			cfg := cluster.Config{URLs: ns.URLs(), MaxBytes: 4 << 30, SnapshotInterval: -1, WriteTimeout: time.Minute}
			a := newReplica(b, cfg, "")
			waitFollowing(b, a)
			mustSchema(b, a, testSchema)
			ctx := context.Background()
			const batch = 10_000
			for n := 0; n < size; n += batch {
				req := datastore.WriteRequest{Touches: make([]api.Tuple, batch)}
				for i := range req.Touches {
					req.Touches[i] = api.Tuple{Object: api.Object{Type: "doc", ID: fmt.Sprintf("r%d", n+i)}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: fmt.Sprintf("u%d", (n+i)%5000)}}
				}
				if _, err := a.Write(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := a.Snapshot(ctx); err != nil {
				b.Fatal(err)
			}
			for range 100 {
				if _, err := a.Write(ctx, benchBatch(1)); err != nil {
					b.Fatal(err)
				}
			}
			want := a.Revision()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				path := filepath.Join(b.TempDir(), "new.db")
				s, err := datastore.Open(ctx, datastore.Config{Path: path})
				if err != nil {
					b.Fatal(err)
				}
				c := cfg
				c.Store, c.Name = s, "test"
				r, err := cluster.New(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
				err = r.Sync(sctx)
				cancel()
				el := time.Since(start)
				if err != nil || r.Revision() < want {
					b.Fatalf("sync: %v (at %d, want %d)", err, r.Revision(), want)
				}
				b.ReportMetric(el.Seconds(), "s-to-ready")
				_ = r.Close()
				_ = s.Close()
			}
		})
	}
}
