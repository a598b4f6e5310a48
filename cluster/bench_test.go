package cluster_test

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// benchCluster starts nodes NATS servers and three replicas with the test
// schema written.
func benchCluster(b *testing.B, nodes int) []*replica {
	b.Helper()
	ns := natstest.Start(b, nodes)
	var rs []*replica
	for i := range 3 {
		// Labelled replica=0, 1, 2 in CPU profiles.
		pprof.Do(context.Background(), pprof.Labels("replica", strconv.Itoa(i)), func(context.Context) {
			rs = append(rs, newReplica(b, cluster.Config{URLs: ns.URLs(), StreamReplicas: nodes, MaxBytes: 512 << 20, SnapshotInterval: -1}, ""))
		})
	}
	for _, r := range rs {
		waitFollowing(b, r)
	}
	mustSchema(b, rs[0], testSchema)
	return rs
}

var benchSeq atomic.Int64

func benchBatch(size int) datastore.WriteRequest { return viewerBatch("doc", "d", size) }

// viewerBatch is size new objects of type typ (IDs starting with
// prefix), each with a viewer.
func viewerBatch(typ, prefix string, size int) datastore.WriteRequest {
	n := benchSeq.Add(1)
	req := datastore.WriteRequest{Touches: make([]api.Tuple, size)}
	for i := range req.Touches {
		req.Touches[i] = api.Tuple{
			Object:   api.Object{Type: typ, ID: fmt.Sprintf("%s%d-%d", prefix, n, i)},
			Relation: "viewer",
			Subject:  api.Subject{Type: "user", ID: fmt.Sprintf("u%d", i)},
		}
	}
	return req
}

// BenchmarkWrite measures writes through the log with three replicas
// applying them: one writer on one replica (each write waits for the last),
// and 8 concurrent writers on each of the three replicas. A write returns
// once its replica applied it; the figure is tuples/s acknowledged, and
// the CPU time of the whole process (NATS, the three replicas applying,
// the writers) per write.
func BenchmarkWrite(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		for _, size := range []int{1, 100} {
			for _, writers := range []int{1, 24} {
				b.Run(fmt.Sprintf("nats=%d/batch=%d/writers=%d", nodes, size, writers), func(b *testing.B) {
					rs := benchCluster(b, nodes)
					ctx := context.Background()
					b.ReportAllocs()
					b.ResetTimer()
					start, cpu0 := time.Now(), processCPU()
					var next atomic.Int64
					var wg sync.WaitGroup
					for w := range writers {
						r := rs[w%len(rs)]
						wg.Go(func() {
							for next.Add(1) <= int64(b.N) {
								if _, err := r.Write(ctx, benchBatch(size)); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					el, cpu := time.Since(start), processCPU()-cpu0
					b.StopTimer()
					b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/write")
					b.ReportMetric(float64(b.N*size)/el.Seconds(), "tuples/s")
					b.ReportMetric(float64(b.N)/el.Seconds(), "writes/s")
				})
			}
		}
	}
}

// BenchmarkReplicationLag measures, for writes made one after another on
// replica A, the time from A's acknowledgement (the write returned, A
// applied it) to the moment replica B applied it. B often applies first:
// those count as 0.
func BenchmarkReplicationLag(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nats=%d", nodes), func(b *testing.B) {
			rs := benchCluster(b, nodes)
			a, other := rs[0], rs[1]
			ctx := context.Background()
			lags := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				rev, err := a.Write(ctx, benchBatch(1))
				if err != nil {
					b.Fatal(err)
				}
				acked := time.Now()
				if err := other.WaitRevision(ctx, rev); err != nil {
					b.Fatal(err)
				}
				lags = append(lags, max(0, time.Since(acked)))
			}
			b.StopTimer()
			slices.Sort(lags)
			q := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) }
			b.ReportMetric(q(0.50), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(q(1), "max-µs")
		})
	}
}

// BenchmarkVisibility measures, for the same writes, the time from the
// start of A's write to the moment B applied it: what a client that
// writes on A and then reads on B without a token would have to wait.
func BenchmarkVisibility(b *testing.B) {
	rs := benchCluster(b, 1)
	a, other := rs[0], rs[1]
	ctx := context.Background()
	lags := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		rev, err := a.Write(ctx, benchBatch(1))
		if err != nil {
			b.Fatal(err)
		}
		if err := other.WaitRevision(ctx, rev); err != nil {
			b.Fatal(err)
		}
		lags = append(lags, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lags[int(0.99*float64(len(lags)-1))].Microseconds()), "p99-µs")
}
