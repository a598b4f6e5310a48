package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
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
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/nexuspdp/nexus/e2e/internal/natsproc"
	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// BenchmarkReplicaCapacityUnderWrites measures what 1,000 writes a second
// cost the check capacity of one replica: a `nexus serve --cluster`
// process with the decision cache off (--no-cache: every check runs the
// policy and reads the store), saturated with checks over gRPC (Envoy
// ext_authz, alternately an RBAC check and a ReBAC check three folders
// deep, from 64 callers that each send the next check when the last is
// answered), while the cluster (one NATS server and another replica,
// which takes the writes) takes no writes, or 1,000 single-tuple writes a
// second that this replica applies from the log. Five interleaved
// rounds of each; the medians are reported.
//
// On this 2-core machine the replica is pinned to CPU 0 (taskset) and
// everything else, NATS, the other replica and this load generator, to
// CPU 1. One core cannot both carry the cluster's writes and send the
// checks a whole core answers, so the replica gets a share q of CPU 0
// (a cgroup's CPU quota, by default 2.5 ms of every 10 ms): saturated, it answers
// what that share can. With writes the share answers (1 - A/q) of its
// checks, A being the CPU time a second that applying the log (and its
// effect on the checks: caches, the garbage collector) costs. If A did
// not depend on the share, a replica with a whole core would keep 1 - A
// of its capacity, one with two cores 1 - A/2 (the log is applied by one
// goroutine; the checks use every core); it reports both. It does depend
// on it (a throttled replica finds more of the log waiting, and a larger
// share needs more checks from the generator's core): NEXUS_BENCH_QUOTA
// sets q (0.5: half of CPU 0) to compare.
//
//	go test -run '^$' -bench ReplicaCapacityUnderWrites -benchtime 1x ./e2e/
//
// It needs taskset, two CPUs and a writable cgroup (v1 cpu controller at
// /sys/fs/cgroup/cpu, or v2 with the cpu controller), as root; it skips
// otherwise.
func BenchmarkReplicaCapacityUnderWrites(b *testing.B) {
	if _, err := exec.LookPath("taskset"); err != nil {
		b.Skip("taskset is not installed: the replica cannot be given a core of its own")
	}
	if n, err := exec.Command("nproc").Output(); err != nil || strings.TrimSpace(string(n)) == "1" {
		b.Skip("one CPU: the replica cannot be given a core of its own")
	}
	quota := 0.25 // of CPU 0; NEXUS_BENCH_QUOTA sets another
	if q := os.Getenv("NEXUS_BENCH_QUOTA"); q != "" {
		v, err := strconv.ParseFloat(q, 64)
		if err != nil || v <= 0 || v > 1 {
			b.Fatalf("NEXUS_BENCH_QUOTA=%q: want a share of one CPU in (0, 1]", q)
		}
		quota = v
	}
	limit := cpuLimit(b, quota)
	// The load generator shares CPU 1 with NATS and the writing replica:
	// its garbage collector runs less often, as nexus' does (a heap of
	// a few MiB would otherwise be collected several times a second).
	defer debug.SetGCPercent(debug.SetGCPercent(400))
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
	// NEXUS_BENCH_PPROF=DIR writes CPU profiles of the replica in the
	// first round, answering checks alone (DIR/replica-idle.pprof) and
	// while it applies the writes (DIR/replica-writes.pprof), and of the
	// replica that takes the writes (DIR/writer.pprof), for go tool pprof
	// with the nexus binary.
	profDir := os.Getenv("NEXUS_BENCH_PPROF")
	var pprof []string
	if profDir != "" {
		pprof = []string{"--pprof"}
	}
	_, writerAdmin, _ := start(pprof...)
	reader, readerAdmin, readerGRPC := start(append([]string{"--no-cache"}, pprof...)...)
	pin(b, reader.Cmd.Process.Pid, "1")
	limit(reader.Cmd.Process.Pid)

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
	// The callers send the requests encoded once: encoding the same
	// message again for every call took a fifth of the generator's CPU,
	// on the core it shares with the cluster.
	encoded := make([]preEncoded, len(reqs))
	for i, r := range reqs {
		resp, err := client.Check(ctx, r)
		if err != nil || resp.GetStatus().GetCode() != 0 {
			b.Fatalf("check: %v %v", resp, err)
		}
		if encoded[i], err = proto.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}

	const writeRate, window = 1000, 10 * time.Second
	var wseq atomic.Int64
	profiled := map[string]bool{}
	// runs reads the replica's count of transactions that applied the
	// log, and of the entries they applied.
	runs := func() (txs, entries float64) {
		resp, err := hc.Get("http://" + readerAdmin + "/metrics")
		if err != nil {
			b.Fatalf("metrics: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(body)) {
			name, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			f, _ := strconv.ParseFloat(v, 64)
			switch name {
			case "nexus_cluster_apply_run_entries_count":
				txs = f
			case "nexus_cluster_apply_run_entries_sum":
				entries = f
			}
		}
		return txs, entries
	}
	// phase saturates the replica with checks (and sends writes, if
	// writes) for the window and returns what it measured.
	phase := func(writes bool) phaseResult {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var failed, behind, checks atomic.Int64
		var firstErr atomic.Value
		for range 64 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					resp := new(authv3.CheckResponse)
					err := conn.Invoke(ctx, authv3.Authorization_Check_FullMethodName, encoded[i%2], resp, grpc.ForceCodecV2(preEncodedCodec{}))
					if err != nil || resp.GetStatus().GetCode() != 0 {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("check: %v %v", resp, err))
						return
					}
					checks.Add(1)
				}
			})
		}
		if writes {
			jobs := make(chan struct{}, writeRate)
			for range 256 {
				wg.Go(func() {
					for range jobs {
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
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
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
						for ; n < int(time.Since(t0).Seconds()*writeRate); n++ {
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
		time.Sleep(time.Second) // warm up
		c0, r0, cpu0, t0 := checks.Load(), revision(readerAdmin), procCPU(b, reader.Cmd.Process.Pid), time.Now()
		g0 := cpuStat(b, 1)
		tx0, e0 := runs()
		name := "replica-idle.pprof"
		if writes {
			name = "replica-writes.pprof"
		}
		if profDir != "" && !profiled[name] {
			profiled[name] = true
			var pw sync.WaitGroup
			var werr error
			if writes {
				pw.Go(func() { werr = profile(hc, writerAdmin, window-time.Second, filepath.Join(profDir, "writer.pprof")) })
			}
			err := profile(hc, readerAdmin, window-time.Second, filepath.Join(profDir, name))
			pw.Wait()
			if err = errors.Join(err, werr); err != nil {
				b.Fatal(err)
			}
			time.Sleep(time.Second)
		} else {
			time.Sleep(window)
		}
		c1, r1, cpu1, el := checks.Load(), revision(readerAdmin), procCPU(b, reader.Cmd.Process.Pid), time.Since(t0)
		g1 := cpuStat(b, 1)
		tx1, e1 := runs()
		close(stop)
		wg.Wait()
		if n := failed.Load(); n > 0 {
			b.Fatalf("writes %v: %d checks or writes failed (first: %v)", writes, n, firstErr.Load())
		}
		if m := behind.Load(); m > 0 {
			b.Fatalf("writes %v: %d writes not sent in time: the core the cluster shares with this generator fell behind", writes, m)
		}
		return phaseResult{
			checks:  float64(c1-c0) / el.Seconds(),
			cpu:     (cpu1 - cpu0).Seconds() / el.Seconds(),
			applied: float64(r1-r0) / el.Seconds(),
			genBusy: g1.busyShare(g0),
			perTx:   (e1 - e0) / max(1, tx1-tx0),
		}
	}
	const rounds = 5
	var idle, busy []float64
	for round := range rounds {
		var res [2]phaseResult // without and with writes
		for i, writes := range []bool{false, true} {
			res[i] = phase(writes)
			if res[i].cpu < 0.9*quota {
				// Not saturated: something else (this generator) is the limit.
				b.Fatalf("writes %v: the replica used %.1f%% of CPU 0, not its quota of %.0f%%: it was not saturated", writes, res[i].cpu*100, quota*100)
			}
		}
		without, with := res[0], res[1]
		if with.applied < 0.9*writeRate {
			b.Fatalf("the replica applied %.0f writes/s, not %d", with.applied, writeRate)
		}
		idle, busy = append(idle, without.checks), append(busy, with.checks)
		b.Logf("round %d: %.0f checks/s without writes, %.0f with %.0f writes/s applied (%.1f%%), %.1f entries a transaction; CPU 1 (NATS, the writer, the generator) %.0f%% and %.0f%% busy",
			round+1, without.checks, with.checks, with.applied, 100*with.checks/without.checks, with.perTx, 100*without.genBusy, 100*with.genBusy)
	}
	// What a whole core keeps, round by round: the store grows by the
	// writes of every round, and a write into a larger store touches more
	// pages of its own.
	whole := make([]float64, rounds)
	for i := range whole {
		whole[i] = 1 - quota*(1-busy[i]/idle[i])
	}
	ratio := median(busy) / median(idle)
	apply := quota * (1 - ratio) // CPU seconds a second
	b.Logf("%.0f%% of a core: %.0f checks/s without writes, %.0f with 1,000 writes/s (%.1f%%); %.0f µs of CPU a check",
		quota*100, median(idle), median(busy), ratio*100, quota/median(idle)*1e6)
	b.Logf("a whole core keeps, round by round: %s", percents(whole))
	b.Logf("applying 1,000 writes/s takes %.1f%% of a core (%.0f µs a write): a replica with one core keeps %.1f%% of its capacity, one with two %.1f%%",
		apply*100, apply*1e6/writeRate, (1-apply)*100, (1-apply/2)*100)
	b.ReportMetric(median(idle)/quota, "checks/s-core")
	b.ReportMetric((1-apply)*median(idle)/quota, "checks/s-core-1000writes")
	b.ReportMetric(1-apply, "ratio-1cpu")
	b.ReportMetric(1-apply/2, "ratio-2cpu")
	b.ReportMetric(apply*1e6/writeRate, "apply-µs/write")
}

// phaseResult is what a phase of BenchmarkReplicaCapacityUnderWrites
// measured, each a second: the checks the replica answered, its CPU
// seconds, the writes it applied; how busy CPU 1 was, and the log entries
// a transaction held.
type phaseResult struct{ checks, cpu, applied, genBusy, perTx float64 }

// preEncoded is a request message already encoded, for preEncodedCodec.
type preEncoded []byte

// preEncodedCodec sends a preEncoded message as it is and decodes
// responses with protobuf.
type preEncodedCodec struct{}

func (preEncodedCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(preEncoded)
	if !ok {
		return nil, fmt.Errorf("preEncodedCodec: cannot send a %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (preEncodedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("preEncodedCodec: cannot decode into a %T", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}

func (preEncodedCodec) Name() string { return "proto" }

// jiffies are a CPU's busy and total time, from /proc/stat.
type jiffies struct{ busy, total uint64 }

// busyShare is the share of the time since j0 that the CPU was busy.
func (j jiffies) busyShare(j0 jiffies) float64 {
	if j.total <= j0.total {
		return 0
	}
	return float64(j.busy-j0.busy) / float64(j.total-j0.total)
}

// cpuStat reads CPU n's line of /proc/stat: idle and iowait are not busy.
func cpuStat(b *testing.B, n int) jiffies {
	b.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	prefix := "cpu" + strconv.Itoa(n) + " "
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		var j jiffies
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseUint(f, 10, 64)
			if i == 8 || i == 9 {
				break // guest time is counted in user time already
			}
			j.total += v
			if i != 3 && i != 4 {
				j.busy += v
			}
		}
		return j
	}
	b.Fatalf("/proc/stat has no line for CPU %d", n)
	return jiffies{}
}

func percents(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f%%", x*100)
	}
	return strings.Join(s, ", ")
}

// cpuLimit makes a cgroup whose CPU quota is share of one CPU, and
// returns a function that moves a process into it; the cgroup is removed
// at the end of the benchmark. It skips the benchmark where no cgroup can
// be made.
func cpuLimit(b *testing.B, share float64) func(pid int) {
	b.Helper()
	const period = 10_000 // µs
	quota := strconv.Itoa(int(share * period))
	name := fmt.Sprintf("nexus-bench-%d", os.Getpid())
	var dir string
	var files [][2]string
	switch {
	case fileExists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"): // v1
		dir = filepath.Join("/sys/fs/cgroup/cpu", name)
		files = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(period)}, {"cpu.cfs_quota_us", quota}}
	case fileExists("/sys/fs/cgroup/cgroup.controllers"): // v2
		dir = filepath.Join("/sys/fs/cgroup", name)
		files = [][2]string{{"cpu.max", quota + " " + strconv.Itoa(period)}}
	default:
		b.Skip("no cgroup CPU controller: the replica cannot be given a share of a core")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Skipf("cannot make a cgroup (%v): the replica cannot be given a share of a core", err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			_ = os.Remove(dir)
			b.Skipf("cannot set the cgroup's CPU quota (%v)", err)
		}
	}
	b.Cleanup(func() {
		// The replica has exited by now (its cleanup ran first); a
		// cgroup with no process left can be removed.
		for i := 0; i < 50 && os.Remove(dir) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	return func(pid int) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			b.Fatalf("moving the replica into its cgroup: %v", err)
		}
	}
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

// profile fetches a CPU profile of length d from the admin listener at
// admin (served with --pprof) into path.
func profile(hc *http.Client, admin string, d time.Duration, path string) error {
	req, err := http.NewRequest("GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+clusterAdminToken)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("profile of %s: %w", admin, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile of %s: status %d, %v", admin, resp.StatusCode, err)
	}
	return os.WriteFile(path, body, 0o600)
}
