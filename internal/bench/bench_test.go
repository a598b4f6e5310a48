package bench

import (
	"context"
	"path/filepath"
	"testing"
)

// BenchmarkTargetSend measures the load generator's cost per check
// against the allow-only baseline server in process (client and server
// share the CPU, as in a run): allocations and time per request.
func BenchmarkTargetSend(b *testing.B) {
	dir, err := smallData()
	if err != nil {
		b.Fatal(err)
	}
	for _, iface := range Interfaces {
		b.Run(iface, func(b *testing.B) {
			srv := startInproc(b, dir, true)
			addr := srv.HTTPAddr()
			if iface == InterfaceGRPC {
				addr = srv.GRPCAddr()
			}
			tg, err := NewTarget(TargetConfig{Interface: iface, Addr: addr})
			if err != nil {
				b.Fatal(err)
			}
			defer tg.Close()
			checks, err := ReadChecksFile(filepath.Join(dir, GateFile("rbac")))
			if err != nil {
				b.Fatal(err)
			}
			reqs, err := tg.Prepare(checks)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if o := tg.Send(ctx, &reqs[i%len(reqs)]); o.Err != nil {
						b.Error(o.Err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkRequestIDSuffix is the per-request cost of giving a prepared
// gRPC check a fresh request ID.
func BenchmarkRequestIDSuffix(b *testing.B) {
	id := []byte("bench-mk3zq9x0a1-12345")
	var sb [160]byte
	b.ReportAllocs()
	for b.Loop() {
		_ = requestIDSuffix(sb[:0], id)
	}
}
