// Package lab reproduces Permit's published Nexus PDP benchmark method for
// nexus and goes beyond it: a deterministic drive data set with a
// correctness gate per check profile, a Zipf workload of many distinct
// checks with known answers, a lean open-model load generator
// (constant-rate latency runs and stepped capacity runs with bisection,
// latency measured from each request's scheduled send time), server-side
// figures from the server's own /metrics and from /proc, a gateway run
// behind real nginx and Caddy, OPA and OpenFGA loaded with the same data
// and measured side by side, a bare grpc-go ext_authz server as the
// transport floor, and reports in JSON, Markdown and SVG.
//
//	m, err := lab.Generate(ctx, lab.GenConfig{Profile: lab.Profiles["small"], Seed: 1, Out: "bench-data"})
//	path, err := lab.GenerateZipf(ctx, "bench-data", lab.ZipfConfig{S: 1.1, Distinct: 100_000})
//	checks, err := lab.ReadChecksFile(path)
//	t, err := lab.NewTarget(lab.TargetConfig{Interface: "grpc", Addr: "127.0.0.1:9191"})
//	res, err := lab.Gate(ctx, t, checks)
//
// # Caveats
//
// The load generator shares the machine with the server when both run
// on one host: compare against the allow-only baseline and the transport
// floor measured in the same run before reading absolute figures.
// Server-side percentiles are interpolated within the server's histogram
// buckets (5 µs to 100 ms), so they are as coarse as those buckets. CPU
// time from /proc/PID/stat counts in 10 ms ticks: short windows give
// coarse CPU per check.
package lab
