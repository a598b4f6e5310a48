package lab

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

// BenchmarkStampID is the per-request cost of giving a prepared gRPC
// check a fresh request ID: a copy of the message and the ID written
// into it.
func BenchmarkStampID(b *testing.B) {
	tg := &Target{idPrefix: "bench-mk3zq9x0a1-"}
	r, err := tg.prepareGRPC(Check{User: "u1", Action: "read", Type: "file", ID: "f9", Tenant: "t2"})
	if err != nil {
		b.Fatal(err)
	}
	var mb [512]byte
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		tg.stamped(mb[:0], &r, seq)
	}
}
