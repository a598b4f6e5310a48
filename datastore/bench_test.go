package datastore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// genSmall writes the small benchmark data set (the sizes of Permit's published benchmark: about
// 1,750 users, 12,610 resources, 12,000 resource tuples, 2,223 role
// assignments, 11 tenants) plus the depth 0..3 chains in the text format.
func genSmall(w io.Writer) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	r := rand.New(rand.NewPCG(1, 2))
	roles := []string{"admin", "editor", "viewer"}
	for i := range 2223 {
		fmt.Fprintf(bw, "tenant:t%d#%s@user:u%d\n", i%11, roles[r.IntN(3)], r.IntN(1750))
	}
	// 2,610 folders in trees of fan-out 4, 10,000 files.
	for i := 1; i < 2610; i++ {
		fmt.Fprintf(bw, "folder:d%d#parent@folder:d%d\n", i, i/4)
	}
	n := 2609
	for i := 0; i < 10000 && n < 12000; i++ {
		fmt.Fprintf(bw, "file:f%d#parent@folder:d%d\n", i, r.IntN(2610))
		n++
	}
	writeChains(bw)
}

// writeChains writes file:chainD (D = 0..3) whose viewer role, for
// user:bench, is on the file itself (D=0) or on the folder D levels above.
func writeChains(w io.Writer) {
	for d := 0; d <= 3; d++ {
		if d == 0 {
			fmt.Fprintf(w, "file:chain0#viewer@user:bench\n")
			continue
		}
		fmt.Fprintf(w, "file:chain%d#parent@folder:chain%d_1\n", d, d)
		for l := 1; l < d; l++ {
			fmt.Fprintf(w, "folder:chain%d_%d#parent@folder:chain%d_%d\n", d, l, d, l+1)
		}
		fmt.Fprintf(w, "folder:chain%d_%d#viewer@user:bench\n", d, d)
	}
}

// genLarge writes n tuples on the drive types: files in folders, folder
// trees, viewers, owners, group editors and group members, then the chains.
func genLarge(w io.Writer, n int) {
	bw := bufio.NewWriterSize(w, 1<<20)
	defer bw.Flush()
	r := rand.New(rand.NewPCG(3, 4))
	users := max(n/20, 1000)
	groups := max(n/200, 100)
	folders := n / 10
	written := 0
	line := make([]byte, 0, 128)
	emit := func(parts ...any) {
		line = line[:0]
		for _, p := range parts {
			switch v := p.(type) {
			case string:
				line = append(line, v...)
			case int:
				line = strconv.AppendInt(line, int64(v), 10)
			}
		}
		line = append(line, '\n')
		bw.Write(line)
		written++
	}
	// Folders: parent, owner, viewer, group editor (4 tuples each).
	for i := 0; i < folders && written < n; i++ {
		if i > 0 {
			emit("folder:d", i, "#parent@folder:d", i/8)
		}
		emit("folder:d", i, "#owner@user:u", r.IntN(users))
		emit("folder:d", i, "#viewer@user:u", r.IntN(users))
		emit("folder:d", i, "#editor@group:g", r.IntN(groups), "#member")
	}
	// Group members: 10 per group.
	for g := 0; g < groups && written < n; g++ {
		for range 10 {
			emit("group:g", g, "#member@user:u", r.IntN(users))
		}
	}
	// Files: parent and viewer until n.
	for i := 0; written < n; i++ {
		emit("file:f", i, "#parent@folder:d", r.IntN(folders))
		if written < n {
			emit("file:f", i, "#viewer@user:u", r.IntN(users))
		}
	}
	writeChains(bw)
}

func benchStore(b *testing.B, gen func(io.Writer)) *datastore.BoltStore {
	b.Helper()
	s := openTemp(b, datastore.Config{})
	sc, err := datastore.ParseSchema(drive.Schema)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	gen(&buf)
	if _, err := s.Import(ctx, &buf, datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		b.Fatal(err)
	}
	return s
}

// largeStore opens (building it on first use) the store of
// NEXUS_BENCH_LARGE_TUPLES tuples (default 20,000,000) at
// $NEXUS_BENCH_LARGE (a file path). Without NEXUS_BENCH_LARGE the large
// benchmarks are skipped.
func largeStore(b *testing.B) *datastore.BoltStore {
	b.Helper()
	path := os.Getenv("NEXUS_BENCH_LARGE")
	if path == "" {
		b.Skip("set NEXUS_BENCH_LARGE=/path/to/large.db to run the large benchmarks")
	}
	n := 20_000_000
	if v := os.Getenv("NEXUS_BENCH_LARGE_TUPLES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	if _, err := os.Stat(path); err != nil {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		s, err := datastore.Open(ctx, datastore.Config{Path: path})
		if err != nil {
			b.Fatal(err)
		}
		sc, _ := datastore.ParseSchema(drive.Schema)
		if _, err := s.WriteSchema(ctx, sc, false); err != nil {
			b.Fatal(err)
		}
		pr, pw := io.Pipe()
		go func() { genLarge(pw, n); pw.Close() }()
		start := time.Now()
		st, err := s.Import(ctx, pr, datastore.ImportOptions{Format: datastore.FormatText})
		if err != nil {
			b.Fatal(err)
		}
		el := time.Since(start)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		fi, _ := os.Stat(path)
		b.Logf("built %s: %d tuples in %v (%.0f tuples/s), file %.2f GiB", path, st.Tuples, el.Round(time.Millisecond),
			float64(st.Tuples)/el.Seconds(), float64(fi.Size())/(1<<30))
	}
	start := time.Now()
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("opened %s in %v, RSS %s", path, time.Since(start), rss())
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// cpuTime is the process's user+system CPU time. On a shared machine the
// wall-clock ns/op includes time spent waiting for a CPU; cpu-ns/op is the
// CPU the benchmark itself used per operation.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func rss() string {
	data, _ := os.ReadFile("/proc/self/status")
	for _, l := range bytes.Split(data, []byte("\n")) {
		if bytes.HasPrefix(l, []byte("VmRSS:")) {
			return string(bytes.TrimSpace(l[6:]))
		}
	}
	return "?"
}

func benchChecks(b *testing.B, s *datastore.BoltStore) {
	ctx := context.Background()
	for d := 0; d <= 3; d++ {
		obj := "file:chain" + strconv.Itoa(d)
		b.Run("depth"+strconv.Itoa(d), func(b *testing.B) {
			ok, err := fixture.CheckText(ctx, s, obj, "read", "user:bench")
			if err != nil || !ok {
				b.Fatalf("check %s = %v, %v", obj, ok, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for b.Loop() {
				if ok, err := fixture.CheckText(ctx, s, obj, "read", "user:bench"); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
			reportCPU(b, cpu)
		})
	}
	b.Run("depth3-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ok, err := fixture.CheckText(ctx, s, "file:chain3", "read", "user:bench"); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	})
}

func BenchmarkCheck(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchChecks(b, benchStore(b, genSmall)) })
	b.Run("large", func(b *testing.B) { benchChecks(b, largeStore(b)) })
}

func benchRoles(b *testing.B, s *datastore.BoltStore) {
	ctx := context.Background()
	sub := api.Subject{Type: "user", ID: "u7"}
	var dst []string
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		var err error
		if dst, err = s.AppendRoles(ctx, dst[:0], sub, "t3"); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

func BenchmarkRoles(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchRoles(b, benchStore(b, genSmall)) })
	b.Run("large", func(b *testing.B) { benchRoles(b, largeStore(b)) })
}

// BenchmarkImport measures import of 1,000,000 generated tuples, sorted in
// runs of 100,000 and merged, into a fresh store per iteration.
func BenchmarkImport(b *testing.B) {
	var buf bytes.Buffer
	genLarge(&buf, 1_000_000)
	data := buf.Bytes()
	sc, _ := datastore.ParseSchema(drive.Schema)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := openTemp(b, datastore.Config{})
		if _, err := s.WriteSchema(context.Background(), sc, false); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Import(context.Background(), bytes.NewReader(data), datastore.ImportOptions{Format: datastore.FormatText, BatchSize: 100_000}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(1_000_000*b.N)/b.Elapsed().Seconds(), "tuples/s")
}

// TestGenerateLarge writes the large benchmark data set as a text tuple
// file for `nexus rel import`: NEXUS_GEN_LARGE=/path/file.txt, size from
// NEXUS_BENCH_LARGE_TUPLES (default 20,000,000). Skipped otherwise.
func TestGenerateLarge(t *testing.T) {
	path := os.Getenv("NEXUS_GEN_LARGE")
	if path == "" {
		t.Skip("set NEXUS_GEN_LARGE=/path/to/tuples.txt to write the large data set")
	}
	n := 20_000_000
	if v := os.Getenv("NEXUS_BENCH_LARGE_TUPLES"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	genLarge(f, n)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSnapshot compares checks on the read transaction that
// concurrent checks share (the store's way) with checks that each begin a
// bbolt read transaction of their own, alone and from parallel goroutines
// (run with -cpu 1,2,4).
func BenchmarkSnapshot(b *testing.B) {
	s := benchStore(b, genSmall)
	ctx := context.Background()
	for _, shared := range []bool{true, false} {
		name := "shared"
		if !shared {
			name = "own-tx"
		}
		b.Run(name, func(b *testing.B) {
			defer datastore.SetShareSnapshots(shared)()
			for _, obj := range []string{"file:chain0", "file:chain3"} {
				b.Run(obj[len("file:"):], func(b *testing.B) {
					b.ReportAllocs()
					cpu := cpuTime()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if ok, err := fixture.CheckText(ctx, s, obj, "read", "user:bench"); !ok || err != nil {
								b.Error(ok, err)
								return
							}
						}
					})
					reportCPU(b, cpu)
				})
			}
		})
	}
}

// BenchmarkApplyRun measures a replica's apply of log entries of one
// tuple each, in runs of 1 and 64 entries per transaction, on a store
// that holds the small data set, with commits that wait for the disk and
// unsynced ones (Unsync): one op is one entry, with its share of the
// commit in time and CPU time.
func BenchmarkApplyRun(b *testing.B) {
	for _, sync := range []string{"fsync", "unsynced"} {
		for _, run := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/run=%d", sync, run), func(b *testing.B) {
				benchApplyRun(b, sync == "unsynced", run)
			})
		}
	}
}

func benchApplyRun(b *testing.B, unsynced bool, run int) {
	s := benchStore(b, genSmall)
	ctx := context.Background()
	if unsynced {
		if err := s.Unsync(ctx); err != nil {
			b.Skip(err)
		}
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		b.Fatal(err)
	}
	bs := make([]datastore.Batch, run)
	n := 0
	b.ReportAllocs()
	cpu := cpuTime()
	b.ResetTimer()
	for done := 0; done < b.N; done += run {
		for i := range bs {
			n++
			bs[i] = datastore.Batch{Write: datastore.WriteRequest{Touches: []api.Tuple{{
				Object: api.Object{Type: "file", ID: "applied" + strconv.Itoa(n)}, Relation: "viewer",
				Subject: api.Subject{Type: "user", ID: "u" + strconv.Itoa(n%1000)},
			}}}}
		}
		res, err := s.ApplyRun(ctx, rev+1, bs)
		if err != nil || res[0] != nil {
			b.Fatal(err, res)
		}
		rev += datastore.Revision(run)
	}
	reportCPU(b, cpu)
}
