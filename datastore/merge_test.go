package datastore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/datastore/internal/index"
)

// sortedRuns writes k runs of n random keys each (like obj keys: a type,
// an ID, a relation and a subject) and returns their paths and every key
// in merged order.
func sortedRuns(tb testing.TB, k, n int) ([]string, [][]byte) {
	tb.Helper()
	r := rand.New(rand.NewPCG(uint64(k), uint64(n)))
	dir := tb.TempDir()
	var paths []string
	var all [][]byte
	for range k {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = index.AppendObjKey(nil, index.IDs{OT: 1 + r.Uint64N(4), Rel: 1 + r.Uint64N(6), ST: 1 + r.Uint64N(3)},
				fmt.Sprintf("f%d", r.IntN(1_000_000)), fmt.Sprintf("u%d", r.IntN(100_000)))
		}
		slices.SortFunc(keys, bytes.Compare)
		keys = slices.CompactFunc(keys, bytes.Equal) // as writeRun writes them
		p, err := writeRun(dir, keys)
		if err != nil {
			tb.Fatal(err)
		}
		paths = append(paths, p)
		all = append(all, keys...)
	}
	slices.SortFunc(all, bytes.Compare)
	return paths, all
}

func TestMergerYieldsEveryKeyInOrder(t *testing.T) {
	for _, k := range []int{1, 2, 3, 7, 40} {
		t.Run(fmt.Sprint(k, "runs"), func(t *testing.T) {
			paths, want := sortedRuns(t, k, 500)
			m, err := newMerger(paths)
			if err != nil {
				t.Fatal(err)
			}
			defer m.close()
			var got [][]byte
			for {
				key, err := m.next()
				if err != nil {
					t.Fatal(err)
				}
				if key == nil {
					break
				}
				got = append(got, bytes.Clone(key))
			}
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("merged %d keys, want %d (or the order differs)", len(got), len(want))
			}
		})
	}
}

// BenchmarkMerger measures the k-way merge of an import's sorted runs:
// 10 runs as BenchmarkImport makes, 40 as a 20-million-tuple import does
// with the default batch.
func BenchmarkMerger(b *testing.B) {
	for _, k := range []int{10, 40} {
		b.Run(fmt.Sprint(k, "runs"), func(b *testing.B) {
			paths, all := sortedRuns(b, k, 20_000)
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				m, err := newMerger(paths)
				if err != nil {
					b.Fatal(err)
				}
				for {
					key, err := m.next()
					if err != nil {
						b.Fatal(err)
					}
					if key == nil {
						break
					}
				}
				m.close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(all)), "ns/key")
			// On a shared machine wall time includes waiting for a CPU.
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*len(all)), "cpu-ns/key")
		})
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
