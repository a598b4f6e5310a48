package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/bench/internal/lab"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/cli"
)

func newRootCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "nexus-bench",
		Short: "Benchmark nexus with Permit's published Nexus PDP method (data, gate, latency, capacity) and beyond",
		Long: `Reproduce the method of Permit's published Nexus PDP benchmark.

  gen       writes a deterministic drive data set and a gate file per profile
  gate      sends a gate file to a running server; fails unless every decision is right
  latency   constant arrival rate (56/s, at most 10 in flight), warm-up then a measured window
  capacity  open-model steps growing x1.25 until P99, failures or drops fail a step
  run       all of it: starts nexus and an allow-only baseline, gates, measures, reports
  gateway   a real nginx and Caddy in front of nexus
  peers     nexus, OPA and OpenFGA side by side

The commands that start servers run the nexus binary --nexus names
(default: $NEXUS_BIN, else nexus in PATH, else bin/nexus). Latency is
measured from each request's scheduled send time (no coordinated
omission). See BENCHMARKS.md for the latest figures.

Exit status: 0 success, 1 failure, 2 wrong invocation.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.AddCommand(newBenchGenCmd(), newGateCmd(), newBenchLatencyCmd(), newBenchCapacityCmd(), newBenchRunCmd(), newBenchGatewayCmd(), newBenchPeersCmd(), newBenchFloorCmd())
	var cpuProfile string
	var stop func()
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write the load generator's CPU profile to this file")
	cmd.PersistentFlags().StringVar(&nexusFlag, "nexus", "", "the nexus binary the lab starts (default: $NEXUS_BIN, else nexus in PATH, else bin/nexus)")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		stop = func() { pprof.StopCPUProfile(); f.Close() }
		return nil
	}
	cmd.PersistentPostRun = func(*cobra.Command, []string) {
		if stop != nil {
			stop()
		}
	}
	cli.Scriptable(cmd)
	return cmd
}

// nexusFlag is --nexus.
var nexusFlag string

// nexusBinary is the nexus binary the lab starts: --nexus, $NEXUS_BIN,
// nexus in PATH or bin/nexus.
func nexusBinary() (string, error) {
	if nexusFlag != "" {
		return nexusFlag, nil
	}
	if p := os.Getenv("NEXUS_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("nexus"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(filepath.Join("bin", "nexus")); err == nil {
		return filepath.Join("bin", "nexus"), nil
	}
	return "", errors.New("no nexus binary: give --nexus (make build writes bin/nexus)")
}

// commandLine is the invocation, for the reports.
func commandLine() string {
	return "nexus-bench " + strings.Join(os.Args[1:], " ")
}

// storeFile is the relationship store's file inside nexus' data
// directory (nexus serve --data-dir), where the lab imports a data set
// before it starts nexus.
const storeFile = "relations.db"

func newBenchGenCmd() *cobra.Command {
	var profile, out string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "gen --profile small|large --seed N --out DIR",
		Short: "Write a deterministic drive data set (schema, tuples, gate files)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, ok := lab.Profiles[profile]
			if !ok {
				return cli.UsageError(cmd, fmt.Errorf("profile %q: want small or large", profile))
			}
			start := time.Now()
			m, err := lab.Generate(cmd.Context(), lab.GenConfig{Profile: p, Seed: seed, Out: out})
			if err != nil {
				return err
			}
			c := m.Counts
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s in %v: %d tuples (%d parent, %d tenant roles, %d viewer grants, %d group members), %d users, %d resource instances, %d tenants; gate files for %s\n",
				out, time.Since(start).Round(time.Millisecond), c.Tuples, c.ParentTuples, c.TenantRoles, c.ViewerGrants, c.GroupMembers,
				c.Users, c.ResourceInstances, c.Tenants, strings.Join(lab.GateProfiles, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&profile, "profile", "small", "small or large")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed: the same seed writes the same files")
	cmd.Flags().StringVar(&out, "out", "bench-data", "output directory")
	return cmd
}

type loadFlags struct {
	target, iface, file, metrics, jsonOut, client string
	inFlight, conns                               int
	seed                                          uint64
	baseline                                      bool
}

func (l *loadFlags) register(cmd *cobra.Command, inFlight int) {
	f := cmd.Flags()
	f.StringVar(&l.target, "target", "127.0.0.1:9191", "server address: the gRPC listener (grpc) or the HTTP listener (allowed, authzen)")
	f.StringVar(&l.iface, "interface", lab.InterfaceGRPC, "grpc, allowed or authzen")
	f.StringVar(&l.file, "file", "", "gate file whose checks are drawn at random")
	f.StringVar(&l.metrics, "metrics", "", "the server's /metrics URL for server-side figures (e.g. http://127.0.0.1:8282/metrics)")
	f.StringVar(&l.jsonOut, "json", "", "also write the result as JSON to this file")
	f.IntVar(&l.inFlight, "in-flight", inFlight, "most requests in flight; more arrivals are dropped")
	f.IntVar(&l.conns, "conns", 0, "connections: gRPC (default 1) or the HTTP idle pool (default 256)")
	f.StringVar(&l.client, "grpc-client", lab.ClientLean, "gRPC client of the load generator: lean (its own HTTP/2 client) or grpc-go")
	f.Uint64Var(&l.seed, "seed", 1, "seed of the random draw of checks")
	f.BoolVar(&l.baseline, "baseline", false, "the target allows everything: do not count wrong decisions as failures")
	_ = cmd.MarkFlagRequired("file")
}

func (l *loadFlags) prepare() (*lab.Target, []lab.Request, error) {
	checks, err := lab.ReadChecksFile(l.file)
	if err != nil {
		return nil, nil, err
	}
	t, err := lab.NewTarget(lab.TargetConfig{Interface: l.iface, Addr: l.target, Conns: l.conns, Client: l.client})
	if err != nil {
		return nil, nil, err
	}
	reqs, err := t.Prepare(checks)
	if err != nil {
		_ = t.Close()
		return nil, nil, err
	}
	return t, reqs, nil
}

func writeJSONFile(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func printLoad(w io.Writer, what string, r lab.LoadResult, s *lab.ServerStats) {
	fmt.Fprintf(w, "%s: offered %.0f/s, achieved %.0f/s; %d scheduled, %d sent, %d dropped, %d failed, %d wrong; 4xx %d, 5xx %d, gRPC errors %d\n",
		what, r.OfferedRate, r.AchievedRate, r.Scheduled, r.Sent, r.Dropped, r.Failed, r.Wrong, r.HTTP4xx, r.HTTP5xx, r.GRPCErrors)
	fmt.Fprintf(w, "  client P50 %.3f ms, P95 %.3f ms, P99 %.3f ms, max %.3f ms\n", r.Client.P50, r.Client.P95, r.Client.P99, r.Client.Max)
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first failure: %s\n", r.FirstError)
	}
	if s != nil {
		fmt.Fprintf(w, "  server P50 %.3f ms, P95 %.3f ms, P99 %.3f ms over %d decisions; cache hits %.0f%%; CPU %.2f s (%.1f µs/check); peak RSS %.0f MiB; decision log %.0f emitted, %.0f dropped\n",
			s.Latency.P50, s.Latency.P95, s.Latency.P99, s.Latency.Count, 100*s.CacheHitRatio, s.CPUSeconds, s.CPUPerCheckMicros, s.PeakRSSBytes/(1<<20), s.LogEmitted, s.LogDropped)
		for _, c := range []string{"hit", "miss", "disabled"} {
			if p, ok := s.ByCache[c]; ok {
				fmt.Fprintf(w, "    cache %s: %d decisions, P50 %.3f ms, P95 %.3f ms, P99 %.3f ms\n", c, p.Count, p.P50, p.P95, p.P99)
			}
		}
	}
}

func newBenchLatencyCmd() *cobra.Command {
	var l loadFlags
	var cfg lab.LatencyConfig
	cmd := &cobra.Command{
		Use:   "latency --target ADDR --file GATE",
		Short: "Constant arrival rate: warm-up, then a measured window",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, reqs, err := l.prepare()
			if err != nil {
				return err
			}
			defer t.Close()
			cfg.Expect, cfg.Seed, cfg.MetricsURL, cfg.MaxInFlight = !l.baseline, l.seed, l.metrics, l.inFlight
			if cfg.Warmup == 0 {
				cfg.Warmup = -1
			}
			res, err := lab.Latency(cmd.Context(), t, reqs, cfg)
			if err != nil {
				return err
			}
			printLoad(cmd.OutOrStdout(), "latency", res.Load, res.Server)
			return writeJSONFile(l.jsonOut, res)
		},
	}
	l.register(cmd, lab.DefaultLatencyInFlight)
	cmd.Flags().Float64Var(&cfg.Rate, "rate", lab.DefaultLatencyRate, "arrivals per second")
	cmd.Flags().DurationVar(&cfg.Warmup, "warmup", lab.DefaultWarmup, "warm-up window (0: none)")
	cmd.Flags().DurationVar(&cfg.Duration, "duration", lab.DefaultMeasure, "measured window")
	return cmd
}

func newBenchCapacityCmd() *cobra.Command {
	var l loadFlags
	var cfg lab.CapacityConfig
	var profile string
	cmd := &cobra.Command{
		Use:   "capacity --target ADDR --file GATE",
		Short: "Open-model arrivals growing x1.25 per step; capacity is the highest passing step",
		Long: `Offer checks at --start-rate, then x--factor per step of --step. A step
passes with the client-side P99 under --limit (default: 30 ms for the rbac
profile, 40 ms otherwise), no failed request and at most 1% of the
arrivals dropped (not sent because --in-flight requests were outstanding).
The run stops at the first failing step; capacity is the highest passing
step's rate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, reqs, err := l.prepare()
			if err != nil {
				return err
			}
			defer t.Close()
			cfg.Expect, cfg.Seed, cfg.MetricsURL, cfg.MaxInFlight = !l.baseline, l.seed, l.metrics, l.inFlight
			if cfg.Limit == 0 {
				cfg.Limit = lab.LimitFor(profile)
			}
			out := cmd.OutOrStdout()
			cfg.Progress = func(s lab.Step) {
				verdict := "pass"
				if !s.Passed {
					verdict = "FAIL: " + s.Reason
				}
				printLoad(out, "step "+verdict, s.Load, s.Server)
			}
			res, err := lab.Capacity(cmd.Context(), t, reqs, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "capacity: %.0f checks/s (P99 limit %.0f ms)\n", res.Capacity, res.LimitMS)
			return writeJSONFile(l.jsonOut, res)
		},
	}
	l.register(cmd, lab.DefaultCapInFlight)
	f := cmd.Flags()
	f.Float64Var(&cfg.StartRate, "start-rate", 100, "rate of the first step (checks/s)")
	f.Float64Var(&cfg.Factor, "factor", lab.DefaultStepFactor, "rate growth per step")
	f.DurationVar(&cfg.Step, "step", lab.DefaultStep, "length of a step")
	f.DurationVar(&cfg.Limit, "limit", 0, "P99 limit of a passing step (default from --profile)")
	f.StringVar(&profile, "profile", "rbac", "check profile of the gate file, for the default limit: rbac (30 ms) or rebacN (40 ms)")
	f.IntVar(&cfg.MaxSteps, "max-steps", 60, "stop after so many steps")
	f.IntVar(&cfg.MaxFails, "max-fails", 2, "stop after so many failing steps in a row")
	f.DurationVar(&cfg.Warmup, "warmup", 5*time.Second, "unjudged window at the start rate before the first step (negative: none)")
	return cmd
}

// benchRunOptions are the flags of bench run.
type benchRunOptions struct {
	profile, out, data, decisionLog string
	seed                            uint64
	cfg                             lab.RunConfig
	noBaseline, noCache             bool
	notes                           []string
}

func newBenchRunCmd() *cobra.Command {
	o := &benchRunOptions{}
	cmd := &cobra.Command{
		Use:   "run --profile small|large --out DIR",
		Short: "Generate, import, start nexus and an allow-only baseline, gate, measure latency and capacity, report",
		Long: `The whole benchmark: generate the data set (unless --data names one),
import it into a fresh store, start nexus (this binary, default policy)
and an allow-only baseline (defaults/allowall) on loopback, run
every gate, then latency and capacity for each profile over each
interface, and write report.json and report.md into --out. The table is
printed at the end next to Permit's published Nexus PDP figures.

The servers log to DIR/nexus.log and DIR/baseline.log. The decision log of
both goes to --decision-log (default /dev/null: events are encoded and
counted, not kept).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	cfg := &o.cfg
	f := cmd.Flags()
	f.StringVar(&o.profile, "profile", "small", "data set: small or large")
	f.Uint64Var(&o.seed, "seed", 1, "data set seed")
	f.StringVar(&o.out, "out", "bench-out", "output directory (report, logs, data)")
	f.StringVar(&o.data, "data", "", "a generated data set to use (default: generate into OUT/data, reused when present)")
	f.StringVar(&o.decisionLog, "decision-log", "/dev/null", "decision log of the servers")
	f.BoolVar(&o.noCache, "no-cache", false, "run nexus with its decision cache off")
	f.BoolVar(&o.noBaseline, "no-baseline", false, "skip the allow-only baseline")
	f.StringSliceVar(&cfg.Profiles, "profiles", nil, "check profiles over gRPC (default: rbac, rebac0, rebac1, rebac2, rebac3)")
	f.StringSliceVar(&cfg.HTTPProfiles, "http-profiles", nil, "check profiles over the HTTP interfaces (default: rbac, rebac3)")
	f.StringSliceVar(&cfg.Interfaces, "interfaces", nil, "interfaces (default: grpc, allowed, authzen)")
	f.Float64Var(&cfg.Latency.Rate, "rate", lab.DefaultLatencyRate, "latency: arrivals per second")
	f.IntVar(&cfg.Latency.MaxInFlight, "latency-in-flight", lab.DefaultLatencyInFlight, "latency: most requests in flight")
	f.DurationVar(&cfg.Latency.Warmup, "warmup", lab.DefaultWarmup, "latency: warm-up window (0: none)")
	f.DurationVar(&cfg.Latency.Duration, "duration", lab.DefaultMeasure, "latency: measured window")
	f.Float64Var(&cfg.Capacity.StartRate, "start-rate", 500, "capacity: rate of the first step")
	f.Float64Var(&cfg.Capacity.Factor, "factor", lab.DefaultStepFactor, "capacity: rate growth per step")
	f.DurationVar(&cfg.Capacity.Step, "step", lab.DefaultStep, "capacity: length of a step")
	f.IntVar(&cfg.Capacity.MaxInFlight, "capacity-in-flight", lab.DefaultCapInFlight, "capacity: most requests in flight")
	f.DurationVar(&cfg.Capacity.Warmup, "capacity-warmup", 5*time.Second, "capacity: unjudged window at the start rate before the first step (negative: none)")
	f.IntVar(&cfg.Conns, "conns", 0, "connections per target: gRPC (default 1) or the HTTP idle pool (default 256)")
	f.StringVar(&cfg.Client, "grpc-client", lab.ClientLean, "gRPC client of the load generator: lean (its own HTTP/2 client) or grpc-go")
	f.BoolVar(&cfg.SkipLatency, "skip-latency", false, "no latency runs")
	f.BoolVar(&cfg.SkipCapacity, "skip-capacity", false, "no capacity runs")
	f.StringArrayVar(&o.notes, "note", nil, "a note for the report (repeatable)")
	return cmd
}

// run is bench run: data, import, servers, lab.Run, report.
func (o *benchRunOptions) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	errOut := cmd.ErrOrStderr()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if o.data == "" {
		o.data = filepath.Join(o.out, "data")
	}
	man, err := o.ensureData(ctx, errOut)
	if err != nil {
		return err
	}
	nexusDir := filepath.Join(o.out, "nexus-data")
	if err := importBenchData(ctx, errOut, o.data, nexusDir, man.Counts.Tuples); err != nil {
		return err
	}
	var logs []*os.File
	defer func() {
		for _, f := range logs {
			_ = f.Close()
		}
	}()
	if err := o.servers(&logs, nexusDir); err != nil {
		return err
	}
	cfg := o.cfg
	cfg.Data = o.data
	cfg.Log = errOut
	cfg.Command = commandLine()
	if cfg.Latency.Warmup == 0 {
		cfg.Latency.Warmup = -1
	}
	rep, runErr := lab.Run(ctx, cfg)
	if rep == nil {
		return runErr
	}
	rep.Notes = append(rep.Notes, o.notes...)
	if err := rep.WriteFiles(o.out); err != nil {
		return err
	}
	rep.Markdown(cmd.OutOrStdout())
	fmt.Fprintf(errOut, "wrote %s and %s\n", filepath.Join(o.out, "report.json"), filepath.Join(o.out, "report.md"))
	return runErr
}

// ensureData generates the data set into o.data unless one is there, and
// returns its manifest.
func (o *benchRunOptions) ensureData(ctx context.Context, errOut io.Writer) (lab.Manifest, error) {
	if _, err := lab.ReadManifest(o.data); err != nil {
		p, ok := lab.Profiles[o.profile]
		if !ok {
			return lab.Manifest{}, cli.WithExit(cli.ExitUsage, fmt.Errorf("profile %q: want small or large", o.profile))
		}
		fmt.Fprintf(errOut, "generating the %s data set (seed %d) into %s\n", o.profile, o.seed, o.data)
		if _, err := lab.Generate(ctx, lab.GenConfig{Profile: p, Seed: o.seed, Out: o.data}); err != nil {
			return lab.Manifest{}, err
		}
	}
	return lab.ReadManifest(o.data)
}

// importBenchData imports the data set into a fresh store in nexusDir.
func importBenchData(ctx context.Context, errOut io.Writer, data, nexusDir string, tuples int64) error {
	if err := os.RemoveAll(nexusDir); err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(errOut, "importing %d tuples into %s\n", tuples, nexusDir)
	var last time.Time
	st, err := lab.ImportData(ctx, data, filepath.Join(nexusDir, storeFile), func(s datastore.ImportStats) {
		if time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(errOut, "  import: %d read, %d committed\n", s.Parsed, s.Tuples)
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(errOut, "imported %d tuples in %v\n", st.Tuples, time.Since(start).Round(time.Millisecond))
	return nil
}

// servers sets o.cfg.Servers: this binary serving nexusDir and, unless
// --no-baseline, serving the allow-only policy. Their log files are
// appended to *logs for the caller to close.
func (o *benchRunOptions) servers(logs *[]*os.File, nexusDir string) error {
	extra := []string(nil)
	if o.noCache {
		extra = append(extra, "--no-cache")
	}
	starter, err := serverStarter(o.out, o.data, o.decisionLog, logs, extra...)
	if err != nil {
		return err
	}
	o.cfg.Servers.Nexus = starter("nexus", "--data-dir", nexusDir)
	if o.noBaseline {
		return nil
	}
	o.cfg.Servers.Baseline, err = allowOnlyStarter(o.out, starter)
	return err
}

// serverStarter returns a maker of server starters: each runs this binary
// with serve flags for the data set in data (its schema, the decision log,
// the trusted subject header) plus extra and its own args, logging to
// OUT/NAME.log (appended to *logs for the caller to close).
func serverStarter(out, data, decisionLog string, logs *[]*os.File, extra ...string) (func(name string, args ...string) func(context.Context) (lab.Server, error), error) {
	exe, err := nexusBinary()
	if err != nil {
		return nil, err
	}
	// The load generator is the trusted hop: it names the subject in the
	// x-user header, as a proxy that verified it would.
	common := []string{"--schema", filepath.Join(data, lab.SchemaFile), "--decision-log", decisionLog, "--log-level", "info", "--trusted-subject-header", "x-user"}
	common = append(common, extra...)
	return func(name string, args ...string) func(context.Context) (lab.Server, error) {
		return func(ctx context.Context) (lab.Server, error) {
			f, err := os.Create(filepath.Join(out, name+".log"))
			if err != nil {
				return nil, err
			}
			*logs = append(*logs, f)
			return lab.StartProcess(ctx, lab.ProcessConfig{Exe: exe, Args: append(append([]string{}, common...), args...), Log: f})
		}
	}, nil
}

// allowOnlyStarter starts the allow-only baseline (an empty store and the
// allow-only policy under out).
func allowOnlyStarter(out string, starter func(name string, args ...string) func(context.Context) (lab.Server, error)) (func(context.Context) (lab.Server, error), error) {
	baseDir := filepath.Join(out, "baseline-data")
	if err := os.RemoveAll(baseDir); err != nil {
		return nil, err
	}
	pol, err := lab.WriteAllowAll(filepath.Join(out, "allowall"))
	if err != nil {
		return nil, err
	}
	return starter("baseline", "--data-dir", baseDir, "--policy", pol), nil
}
