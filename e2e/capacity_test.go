package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nexuspdp/nexus/e2e/internal/natsproc"
	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// BenchmarkReplicaCapacityUnderWrites measures what 1,000 writes a second
// cost the check capacity of one replica: a `nexus serve --cluster`
// process with the decision cache off (--no-cache: every check runs the
// policy and reads the store), while the cluster (one NATS server and
// another replica, which takes the writes) takes no writes, or
// 1,000 single-tuple writes a second that this replica applies from the
// log.
//
// On this 2-core machine the replica is pinned to CPU 0 alone (taskset)
// and everything else, NATS, the other replica and this load generator,
// to CPU 1, so that the replica's CPU time (read from /proc) is its own:
// its checks and its applying the log. (Three NATS servers and a third
// replica are more than the one core left carries at 1,000 writes a
// second; they change nothing of what the measured replica does.) One
// core cannot both generate enough checks to saturate the replica and
// carry the cluster's writes, so checks come at fixed rates over gRPC
// (Envoy ext_authz, alternately
// an RBAC check and a ReBAC check three folders deep), 750 and 1,500 a
// second, each with and without writes, in three interleaved rounds. The
// replica's CPU with writes, less without, is what the writes cost it:
// A (applying the log) plus d for each check (what the writes add to a
// check: caches, the garbage collector); two check rates tell them apart.
// The capacity of one core is then 1 / (CPU per check) without writes
// and (1 - A) / (CPU per check + d) with them.
//
//	go test -run '^$' -bench ReplicaCapacityUnderWrites -benchtime 1x ./e2e/
func BenchmarkReplicaCapacityUnderWrites(b *testing.B) {
	if _, err := exec.LookPath("taskset"); err != nil {
		b.Skip("taskset is not installed: the replica cannot be given a core of its own")
	}
	if n, err := exec.Command("nproc").Output(); err != nil || strings.TrimSpace(string(n)) == "1" {
		b.Skip("one CPU: the replica cannot be given a core of its own")
	}
	// This process and what it starts run on CPU 1; the replica measured
	// is moved to CPU 0 once started.
	pin(b, os.Getpid(), "2")
	nats := natsproc.Start(b, 1)
	conf := filepath.Join(b.TempDir(), "nexus.yaml")
	if err := os.WriteFile(conf, []byte("cluster:\n  stream_replicas: 1\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	start := func(extra ...string) (*nexusproc.Proc, string, string) {
		dir := b.TempDir()
		admin, grpcAddr := nexusproc.FreeAddr(b), nexusproc.FreeAddr(b)
		args := append([]string{"serve", "--config", conf, "--cluster", nats.URLs(), "--cluster-name", "capacity",
			"--data-dir", filepath.Join(dir, "data"), "--grpc-addr", grpcAddr, "--http-addr", "-", "--admin-addr", admin,
			"--admin-token", clusterAdminToken, "--trusted-subject-header", "x-user"}, extra...)
		return nexusproc.Start(b, dir, admin, args...), admin, grpcAddr
	}
	_, writerAdmin, _ := start()
	reader, readerAdmin, readerGRPC := start("--no-cache")
	pin(b, reader.Cmd.Process.Pid, "1")

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	revision := func(admin string) uint64 {
		req, _ := http.NewRequest("GET", "http://"+admin+"/v1/revision", nil)
		req.Header.Set("Authorization", "Bearer "+clusterAdminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		var out struct{ Revision uint64 }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return out.Revision
	}
	deadline := time.Now().Add(60 * time.Second)
	for revision(readerAdmin) == 0 || revision(readerAdmin) != revision(writerAdmin) {
		if time.Now().After(deadline) {
			b.Fatal("the replicas did not converge on the demo data")
		}
		time.Sleep(100 * time.Millisecond)
	}

	conn, err := grpc.NewClient(readerGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	client := authv3.NewAuthorizationClient(conn)
	reqs := []*authv3.CheckRequest{
		envoyCheck(b, "GET", "/tenants/acme/files/report.pdf", "alice", ""),
		envoyCheck(b, "GET", "/files/report.pdf", "bob", ""),
	}
	ctx := context.Background()
	for _, r := range reqs {
		resp, err := client.Check(ctx, r)
		if err != nil || resp.GetStatus().GetCode() != 0 {
			b.Fatalf("check: %v %v", resp, err)
		}
	}

	const writeRate, window = 1000, 10 * time.Second
	var wseq atomic.Int64
	// phase runs checks at checkRate (and writes, if writes) for the
	// window and returns the replica's CPU use (CPU seconds a second) and
	// the writes it applied per second.
	phase := func(checkRate int, writes bool) (cpuShare, applied float64) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var failed, behind atomic.Int64
		var firstErr atomic.Value
		pace := func(rate, workers int, do func()) {
			jobs := make(chan struct{}, rate)
			for range workers {
				wg.Go(func() {
					for range jobs {
						do()
					}
				})
			}
			wg.Go(func() {
				defer close(jobs)
				t0, n := time.Now(), 0
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						for ; n < int(time.Since(t0).Seconds()*float64(rate)); n++ {
							select {
							case jobs <- struct{}{}:
							default:
								behind.Add(1) // the generator fell behind
							}
						}
					}
				}
			})
		}
		var checks atomic.Int64
		pace(checkRate, 16, func() {
			i := checks.Add(1)
			resp, err := client.Check(ctx, reqs[i%2])
			if err != nil || resp.GetStatus().GetCode() != 0 {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("check: %v %v", resp, err))
			}
		})
		if writes {
			pace(writeRate, 256, func() {
				i := wseq.Add(1)
				body := fmt.Sprintf(`{"touches":["file:load-%d#viewer@user:w%d"]}`, i, i%1000)
				req, _ := http.NewRequest("POST", "http://"+writerAdmin+"/v1/relationships", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+clusterAdminToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("write: %v %v", resp, err))
				}
				if resp != nil {
					resp.Body.Close()
				}
			})
		}
		time.Sleep(time.Second) // warm up
		c0, r0, cpu0, t0 := checks.Load(), revision(readerAdmin), procCPU(b, reader.Cmd.Process.Pid), time.Now()
		time.Sleep(window)
		c1, r1, cpu1, el := checks.Load(), revision(readerAdmin), procCPU(b, reader.Cmd.Process.Pid), time.Since(t0)
		close(stop)
		wg.Wait()
		if n := failed.Load(); n > 0 {
			b.Fatalf("writes %v: %d checks or writes failed (first: %v)", writes, n, firstErr.Load())
		}
		if m := behind.Load(); m > 0 {
			// The core the cluster shares with this generator fell
			// behind: the rates below say what was sent and applied.
			b.Logf("writes %v: %d checks or writes not sent in time", writes, m)
		}
		if got := float64(c1-c0) / el.Seconds(); got < 0.95*float64(checkRate) || got > 1.05*float64(checkRate) {
			b.Fatalf("%.0f checks/s answered, %d offered", got, checkRate)
		}
		return (cpu1 - cpu0).Seconds() / el.Seconds(), float64(r1-r0) / el.Seconds()
	}
	// Two check rates with and without writes: the replica's CPU is
	// (checks/s x CPU per check) without writes, and with writes
	// (checks/s x (CPU per check + d)) + A, where A is applying the
	// log and d what the writes add to each check (caches, the garbage
	// collector). Two rates tell A and d apart.
	const lo, hi = 750, 1500
	var idleLo, idleHi, busyLo, busyHi []float64
	for round := range 3 {
		for _, c := range []struct {
			rate   int
			writes bool
			into   *[]float64
		}{{hi, false, &idleHi}, {hi, true, &busyHi}, {lo, false, &idleLo}, {lo, true, &busyLo}} {
			share, applied := phase(c.rate, c.writes)
			b.Logf("round %d, %d checks/s, writes %v: replica CPU %.1f%% of its core, %.0f writes/s applied", round+1, c.rate, c.writes, share*100, applied)
			if c.writes && applied < 0.9*writeRate {
				b.Fatalf("the replica applied %.0f writes/s, not %d", applied, writeRate)
			}
			*c.into = append(*c.into, share)
		}
	}
	perCheck := median(idleHi) / hi
	extraHi, extraLo := median(busyHi)-median(idleHi), median(busyLo)-median(idleLo)
	d := max(0, (extraHi-extraLo)/(hi-lo))
	apply := max(0, extraLo-lo*d)
	idle := 1 / perCheck
	busy := (1 - apply) / (perCheck + d)
	b.Logf("CPU per check %.0f µs without writes, +%.1f µs with; applying 1,000 writes/s takes %.1f%% of the core (%.0f µs a write)",
		perCheck*1e6, d*1e6, apply*100, apply*1e6/writeRate)
	b.Logf("capacity of one core: %.0f checks/s without writes, %.0f with 1,000 writes/s (%.1f%%)", idle, busy, 100*busy/idle)
	b.ReportMetric(idle, "checks/s-idle")
	b.ReportMetric(busy, "checks/s-1000writes")
	b.ReportMetric(busy/idle, "ratio")
	b.ReportMetric(apply*1e6/writeRate, "apply-µs/write")
}

// pin sets the CPU affinity of every thread of process pid to mask.
func pin(tb testing.TB, pid int, mask string) {
	tb.Helper()
	if out, err := exec.Command("taskset", "-a", "-p", mask, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		tb.Fatalf("taskset %s %d: %v\n%s", mask, pid, err, out)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
