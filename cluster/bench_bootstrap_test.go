package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// BenchmarkBootstrap measures how long a new replica on an empty data
// directory takes to be ready (New, then Sync returned: the newest
// snapshot fetched from the object store and restored, the log's tail of
// 100 writes applied) from a snapshot of the benchmark's large data set
// (20,000,000 tuples, internal/bench), and the replica's peak RSS (VmHWM,
// which counts the data file's pages the process mapped and touched). The
// replica runs in a process of its own (this test binary again, as
// TestBootstrapProcess), so that its peak RSS is its alone; NATS and the
// setup stay in this process.
//
// It is opt-in, for its time, memory and disk (several GB under
// $TMPDIR): NEXUS_BENCH_BOOTSTRAP_DATA names a data set directory made by
// the benchmark lab (`nexus-bench gen --profile large`, in bench/), with
// -benchtime=1x; NEXUS_BENCH_BOOTSTRAP_TUPLES imports only that many of
// its tuples.
//
// The store is built by a direct import (the log would take hours), then
// made a replica's snapshot: the revision after the import's records the
// cluster's log as the one it follows, and the log is given as many
// entries as that revision (writes of a replica that does not restore),
// so the new replica sees a snapshot that reaches the log, as it would in
// production.
func BenchmarkBootstrap(b *testing.B) {
	data := os.Getenv("NEXUS_BENCH_BOOTSTRAP_DATA")
	if data == "" {
		b.Skip("set NEXUS_BENCH_BOOTSTRAP_DATA to a data set made by nexus-bench gen --profile large to bootstrap a replica from its snapshot")
	}
	ctx := context.Background()
	tmp := b.TempDir()
	limit, _ := strconv.ParseInt(os.Getenv("NEXUS_BENCH_BOOTSTRAP_TUPLES"), 10, 64)

	// The store, imported directly.
	start := time.Now()
	srcPath := filepath.Join(tmp, "src.db")
	src, err := datastore.Open(ctx, datastore.Config{Path: srcPath})
	if err != nil {
		b.Fatal(err)
	}
	schemaSrc, err := os.ReadFile(filepath.Join(data, "schema.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	sc, err := schema.Parse(schemaSrc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := src.WriteSchema(ctx, sc, false); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(filepath.Join(data, "tuples.txt"))
	if err != nil {
		b.Fatal(err)
	}
	st, err := src.Import(ctx, firstLines(f, limit), datastore.ImportOptions{Format: datastore.FormatText})
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	imported, _ := src.Revision(ctx)
	b.Logf("imported %d tuples in %v (revision %d)", st.Tuples, time.Since(start).Round(time.Second), imported)

	// The log, with as many entries as the store has revisions, and its
	// identity recorded in the store at the next one.
	ns := natstest.Start(b, 1)
	cfg := cluster.Config{URLs: ns.URLs(), Name: "boot", MaxBytes: 4 << 30, SnapshotInterval: -1, WriteTimeout: time.Minute}
	a := newReplica(b, cfg, "")
	waitFollowing(b, a)
	if _, err := a.WriteSchema(ctx, sc, false); err != nil {
		b.Fatal(err)
	}
	pad := func(i int) datastore.WriteRequest {
		return datastore.WriteRequest{Touches: fixture.Tuples(b, fmt.Sprintf("file:pad-%d#viewer@user:pad", i))}
	}
	for i := a.Revision(); i <= imported; i++ {
		if _, err := a.Write(ctx, pad(int(i))); err != nil {
			b.Fatal(err)
		}
	}
	logID, err := a.store.ReplicaMeta(ctx, "cluster.stream")
	if err != nil || logID == nil {
		b.Fatalf("the log's identity: %q %v", logID, err)
	}
	snapRev := a.Revision()
	if snapRev != imported+1 {
		b.Fatalf("log at %d, want %d", snapRev, imported+1)
	}
	if err := src.ApplyAt(ctx, snapRev, datastore.Batch{Meta: map[string][]byte{"cluster.stream": logID}}); err != nil {
		b.Fatal(err)
	}

	// The snapshot, written as a replica writes one.
	snapFile, err := os.Create(filepath.Join(tmp, "snapshot.db"))
	if err != nil {
		b.Fatal(err)
	}
	rev, size, err := src.Backup(ctx, snapFile)
	if err != nil || rev != snapRev {
		b.Fatalf("backup: %v (revision %d, want %d)", err, rev, snapRev)
	}
	if err := src.Close(); err != nil {
		b.Fatal(err)
	}
	if _, err := snapFile.Seek(0, 0); err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(ns.URLs()[0])
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(ctx, "nexus-boot")
	if err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	if _, err := cluster.PutPaced(ctx, js, obs, "nexus-boot", jetstream.ObjectMeta{
		Name:     fmt.Sprintf("snapshot/%020d", snapRev),
		Metadata: map[string]string{"revision": strconv.FormatUint(uint64(snapRev), 10), "log": string(logID), "replica": "bench"},
	}, snapFile); err != nil {
		b.Fatal(err)
	}
	snapFile.Close()
	_ = os.Remove(snapFile.Name())
	_ = os.Remove(srcPath)
	b.Logf("snapshot at revision %d: %d bytes, put in %v", snapRev, size, time.Since(start).Round(time.Second))

	// The tail, then nobody writes.
	for i := range 100 {
		if _, err := a.Write(ctx, pad(int(snapRev)+i)); err != nil {
			b.Fatal(err)
		}
	}
	want := a.Revision()
	a.close()

	b.ResetTimer()
	for range b.N {
		dir := b.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestBootstrapProcess$", "-test.v")
		cmd.Env = append(os.Environ(), "NEXUS_BOOTSTRAP_CHILD="+ns.URLs()[0]+" "+filepath.Join(dir, "nexus.db")+" "+strconv.FormatUint(uint64(want), 10))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("replica process: %v\n%s", err, out)
		}
		var res bootstrapResult
		for _, line := range strings.Split(string(out), "\n") {
			if j, ok := strings.CutPrefix(line, "bootstrap: "); ok {
				if err := json.Unmarshal([]byte(j), &res); err != nil {
					b.Fatal(err)
				}
			}
		}
		if res.Revision < uint64(want) {
			b.Fatalf("replica process: %+v, want revision %d\n%s", res, want, out)
		}
		// The process's own peak RSS (VmHWM). Not its rusage: Linux
		// counts in it the peak of the process that started it (the
		// address space exec replaced), here the one holding NATS and
		// the imported store.
		rss, err := strconv.ParseInt(strings.TrimSuffix(res.Memory["VmHWM"], " kB"), 10, 64)
		if err != nil {
			b.Fatalf("replica process: VmHWM %q", res.Memory["VmHWM"])
		}
		fi, _ := os.Stat(filepath.Join(dir, "nexus.db"))
		b.ReportMetric(res.Seconds, "s-to-ready")
		b.ReportMetric(float64(rss)/1024, "peak-RSS-MiB")
		b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
		b.Logf("ready in %.1fs at revision %d (restore %.1fs); peak RSS %d MiB; snapshot %d MiB, data file %d MiB; memory when ready %v",
			res.Seconds, res.Revision, res.Restore, rss/1024, size>>20, fi.Size()>>20, res.Memory)
	}
}

type bootstrapResult struct {
	Seconds  float64 `json:"seconds"`  // New to Sync returned
	Restore  float64 `json:"restore"`  // New to the first revision (the restored snapshot)
	Revision uint64  `json:"revision"` // after Sync
	// Memory is the process's memory when ready: peak RSS (VmHWM), RSS
	// by kind (anonymous, file-backed: the data file's mapped pages),
	// and the Go heap's reservation (which keeps its peak).
	Memory map[string]string `json:"memory"`
}

// TestBootstrapProcess is not a test: it is the new replica that
// BenchmarkBootstrap starts (this test binary again). It prints
// "bootstrap: <JSON bootstrapResult>".
func TestBootstrapProcess(t *testing.T) {
	args := strings.Fields(os.Getenv("NEXUS_BOOTSTRAP_CHILD"))
	if len(args) != 3 {
		t.Skip("the replica process of BenchmarkBootstrap")
	}
	want, _ := strconv.ParseUint(args[2], 10, 64)
	ctx := context.Background()
	start := time.Now()
	s, err := datastore.Open(ctx, datastore.Config{Path: args[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r, err := cluster.New(ctx, cluster.Config{URLs: []string{args[0]}, Name: "boot", Store: s, SnapshotInterval: -1, MaxBytes: 4 << 30, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var restored time.Duration
	for r.Revision() == 0 {
		time.Sleep(10 * time.Millisecond)
		if time.Since(start) > 30*time.Minute {
			t.Fatalf("no snapshot restored: %+v", r.Status())
		}
	}
	restored = time.Since(start)
	if err := r.Sync(ctxT(t, 30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	if uint64(r.Revision()) < want {
		t.Fatalf("at %d after Sync, want %d", r.Revision(), want)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, _ := os.ReadFile("/proc/self/status")
	mem := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.HasPrefix(k, "Rss") || k == "VmHWM" {
			mem[k] = strings.TrimSpace(v)
		}
	}
	mem["GoHeapSys"] = fmt.Sprintf("%d kB", ms.HeapSys>>10)
	j, _ := json.Marshal(bootstrapResult{Seconds: el.Seconds(), Restore: restored.Seconds(), Revision: uint64(r.Revision()), Memory: mem})
	fmt.Printf("bootstrap: %s\n", j)
}

// firstLines reads the first n lines of r (all of them if n <= 0).
func firstLines(r io.Reader, n int64) io.Reader {
	if n <= 0 {
		return r
	}
	pr, pw := io.Pipe()
	go func() {
		br := bufio.NewReaderSize(r, 1<<20)
		for i := int64(0); i < n; i++ {
			line, err := br.ReadSlice('\n')
			if _, werr := pw.Write(line); werr != nil || err != nil {
				if err == io.EOF || err == nil {
					break
				}
				pw.CloseWithError(err)
				return
			}
		}
		pw.Close()
	}()
	return pr
}
