package cluster_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
	"github.com/nexuspdp/nexus/pdp"
)

// BenchmarkCheckUnderWrites measures the checks one replica answers
// (one goroutine, so that the writes get the other core) while the
// cluster takes no writes, and while another replica is offered 1,000
// single-tuple writes a second that this replica applies. check=store
// asks the replica's store directly (under a microsecond a check, so
// that any background work shows); check=policy decides an Envoy
// CheckRequest through the decision core with the default policy and the
// decision cache off, as a replica serves one (alternately an RBAC check
// and a ReBAC check three folders deep). It reports the writes issued
// (offered-writes/s: a ticker that falls behind offers fewer), the
// writes this replica applied per second during the measurement, the
// process's CPU time per check, the checking thread's own, the rest of
// the process's per write applied, and the entries this replica applied
// per transaction. NATS is one node: the replicas and
// NATS share this machine's cores, as they would not in production.
func BenchmarkCheckUnderWrites(b *testing.B) {
	for _, mode := range []string{"store", "policy"} {
		for _, rate := range []int{0, 1000} {
			b.Run(fmt.Sprintf("check=%s/offered-writes=%d/s", mode, rate), func(b *testing.B) {
				benchCheckUnderWrites(b, mode, rate)
			})
		}
	}
}

func benchCheckUnderWrites(b *testing.B, mode string, rate int) {
	ctx := context.Background()
	var (
		reader, writer *replica
		check          func(i int) error
		write          func() datastore.WriteRequest
	)
	switch mode {
	case "store":
		rs := benchCluster(b, 1)
		reader, writer = rs[0], rs[1]
		seed := benchBatch(1000)
		rev, err := writer.Write(ctx, seed)
		if err != nil {
			b.Fatal(err)
		}
		if err := waitRev(reader, rev, 30*time.Second); err != nil {
			b.Fatal(err)
		}
		write = func() datastore.WriteRequest { return benchBatch(1) }
		check = func(i int) error {
			t := seed.Touches[i%len(seed.Touches)]
			res, err := reader.store.Check(ctx, datastore.CheckRequest{Object: t.Object, Permission: "read", Subject: t.Subject})
			if err != nil || !res.Allowed {
				return fmt.Errorf("check %v: %v %w", t, res.Allowed, err)
			}
			return nil
		}
	case "policy":
		reader, writer = drivePolicyCluster(b)
		p := policyPDP(b, reader)
		reqs := []*authv3.CheckRequest{
			fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"}),
			fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"}),
		}
		for _, req := range reqs {
			if d, err := p.Envoy(ctx, pdp.IfaceGRPC, req); err != nil || !d.Allowed || d.Cache != pdp.CacheDisabled {
				b.Fatalf("policy check: allowed %v, cache %q, %v", d.Allowed, d.Cache, err)
			}
		}
		write = func() datastore.WriteRequest { return driveBatch(1) }
		check = func(i int) error {
			d, err := p.Envoy(ctx, pdp.IfaceGRPC, reqs[i%len(reqs)])
			if err != nil || !d.Allowed {
				return fmt.Errorf("policy check %d: %v %w", i%len(reqs), d.Allowed, err)
			}
			return nil
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var issued atomic.Int64
	var inflight sync.WaitGroup
	go func() {
		defer close(done)
		if rate == 0 {
			<-stop
			return
		}
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		t0 := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				// A ticker drops the ticks its reader misses: issue every
				// write due by now, so that the offered rate holds on a
				// busy machine. Asynchronous: the pace is the clock's,
				// not a write's round trip.
				for issued.Load() < int64(time.Since(t0).Seconds()*float64(rate)) {
					issued.Add(1)
					inflight.Go(func() {
						if _, err := writer.Write(ctx, write()); err != nil {
							b.Error(err)
						}
					})
				}
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	startRev, startIssued := reader.Revision(), issued.Load()
	startRuns, _ := runCount(b, reader)
	// The checking goroutine keeps its thread, whose CPU time is the
	// checks' own: what the writes cost the checks beyond the core they
	// take (lock waits aside), whatever else runs on the machine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, tcpu0 := processCPU(), threadCPU()
	start := time.Now()
	for i := range b.N {
		if err := check(i); err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	cpu, tcpu := processCPU()-cpu0, threadCPU()-tcpu0
	b.StopTimer()
	offered, applied := issued.Load()-startIssued, reader.Revision()-startRev
	runs, _ := runCount(b, reader)
	runs -= startRuns
	close(stop)
	<-done
	inflight.Wait()
	b.ReportMetric(float64(b.N)/el.Seconds(), "checks/s")
	b.ReportMetric(float64(offered)/el.Seconds(), "offered-writes/s")
	b.ReportMetric(float64(applied)/el.Seconds(), "applied-writes/s")
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/check")
	b.ReportMetric(float64(tcpu)/float64(b.N), "checker-cpu-ns/check")
	if applied > 0 {
		// What the writes cost the process (NATS, three replicas
		// applying, the writer) beyond the checks, and how many entries
		// the reader applied per transaction.
		b.ReportMetric(float64(cpu-tcpu)/1e3/float64(applied), "other-cpu-µs/write")
		b.ReportMetric(float64(applied)/float64(max(runs, 1)), "entries/commit")
	}
}

// runCount is the number of transactions r applied entries in.
func runCount(b *testing.B, r *replica) (uint64, error) {
	b.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == "nexus_cluster_apply_run_entries" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount(), nil
		}
	}
	return 0, nil
}

// drivePolicyCluster starts one NATS node and three replicas holding the
// drive schema and demo tuples, written through the log; it returns the
// replica that will answer checks and another that takes writes.
func drivePolicyCluster(b *testing.B) (reader, writer *replica) {
	b.Helper()
	ns := natstest.Start(b, 1)
	var rs []*replica
	for i := range 3 {
		// In a CPU profile, replica=0 is the reader's own work (go tool
		// pprof -tagfocus replica:0).
		pprof.Do(context.Background(), pprof.Labels("replica", strconv.Itoa(i)), func(context.Context) {
			rs = append(rs, newReplica(b, cluster.Config{URLs: ns.URLs(), MaxBytes: 512 << 20, SnapshotInterval: -1}, ""))
		})
	}
	for _, r := range rs {
		waitFollowing(b, r)
	}
	mustSchema(b, rs[0], string(drive.Schema))
	var req datastore.WriteRequest
	for line := range strings.Lines(string(drive.Tuples)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t, err := api.ParseTuple(line)
		if err != nil {
			b.Fatal(err)
		}
		req.Touches = append(req.Touches, t)
	}
	rev, err := rs[1].Write(ctxT(b, 20*time.Second), req)
	if err != nil {
		b.Fatal(err)
	}
	if err := waitRev(rs[0], rev, 30*time.Second); err != nil {
		b.Fatal(err)
	}
	return rs[0], rs[1]
}

// driveBatch is benchBatch on the drive schema: new files, each with a
// viewer.
func driveBatch(size int) datastore.WriteRequest { return viewerBatch("file", "w", size) }

// policyPDP is a decision core on r's store with the default policy and
// the decision cache off, as a replica serves Envoy's checks.
func policyPDP(b *testing.B, r *replica) *pdp.PDP {
	b.Helper()
	ctx := context.Background()
	p, err := pdp.New(ctx, pdp.Config{
		Engine: fixture.StoreEngine(b, r.store), Store: r.store, Relations: r.store, Policy: fixture.Bundle(b),
		CacheDisabled: true, Revisions: r.Replica,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close(ctx) })
	return p
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
