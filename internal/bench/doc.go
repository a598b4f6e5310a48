// Package bench reproduces Permit's published Nexus PDP benchmark method for
// nexus: a deterministic drive data set
// with a correctness gate per check profile, a lean open-model load
// generator (constant-rate latency runs and stepped capacity runs, with
// latency measured from each request's scheduled send time), server-side
// figures from the server's own /metrics, and a report in JSON and
// Markdown.
//
//	m, err := bench.Generate(ctx, bench.GenConfig{Profile: bench.Profiles["small"], Seed: 1, Out: "bench-data"})
//	checks, err := bench.ReadChecksFile("bench-data/gate-rbac.ndjson")
//	t, err := bench.NewTarget(bench.TargetConfig{Interface: "grpc", Addr: "127.0.0.1:9191"})
//	res, err := bench.Gate(ctx, t, checks)
//
// # Caveats
//
// The load generator shares the machine with the server when both run
// on one host: compare against the allow-only baseline measured in the
// same run before reading absolute figures. Server-side percentiles are
// interpolated within the server's histogram buckets (5 µs to 100 ms),
// so they are as coarse as those buckets.
package bench
