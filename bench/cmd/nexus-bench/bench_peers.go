package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/nexuspdp/nexus/bench/internal/lab"
	"github.com/nexuspdp/nexus/internal/cli"
)

// benchSetup are the flags shared by bench gateway and bench peers: the
// data set, the Zipf workload and where the run writes.
type benchSetup struct {
	profile, out, data, decisionLog string
	seed                            uint64
	zipf                            lab.ZipfConfig
	notes                           []string
}

func (b *benchSetup) register(cmd *cobra.Command, out string) {
	f := cmd.Flags()
	f.StringVar(&b.profile, "profile", "small", "data set: small or large")
	f.Uint64Var(&b.seed, "seed", 1, "data set seed")
	f.StringVar(&b.out, "out", out, "output directory (report, charts, logs, data)")
	f.StringVar(&b.data, "data", "", "a generated data set to use (default: generate into OUT/data, reused when present)")
	f.StringVar(&b.decisionLog, "decision-log", "/dev/null", "decision log of the nexus servers")
	f.Float64Var(&b.zipf.S, "zipf-s", lab.DefaultZipfS, "skew of the Zipf workload (above 1)")
	f.IntVar(&b.zipf.Distinct, "distinct", lab.DefaultZipfDistinct, "distinct checks in the Zipf workload")
	f.StringArrayVar(&b.notes, "note", nil, "a note for the report (repeatable)")
}

// prepare generates (or reuses) the data set and the Zipf workload and
// imports the data set into a fresh store per directory in stores (under
// OUT). It returns the manifest and the workload.
func (b *benchSetup) prepare(ctx context.Context, errOut io.Writer, stores ...string) (lab.Manifest, []lab.Check, error) {
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return lab.Manifest{}, nil, err
	}
	if b.data == "" {
		b.data = filepath.Join(b.out, "data")
	}
	o := &benchRunOptions{profile: b.profile, seed: b.seed, data: b.data}
	man, err := o.ensureData(ctx, errOut)
	if err != nil {
		return man, nil, err
	}
	if err := b.zipf.Validate(); err != nil {
		return man, nil, cli.WithExit(cli.ExitUsage, err)
	}
	path := filepath.Join(b.data, lab.ZipfFile(b.zipf.S))
	work, err := lab.ReadChecksFile(path)
	if err != nil || len(work) != b.zipf.Distinct {
		start := time.Now()
		if path, err = lab.GenerateZipf(ctx, b.data, b.zipf); err != nil {
			return man, nil, err
		}
		if work, err = lab.ReadChecksFile(path); err != nil {
			return man, nil, err
		}
		fmt.Fprintf(errOut, "drew the Zipf workload (skew %v, %d distinct checks) into %s in %v\n", b.zipf.S, len(work), path, time.Since(start).Round(time.Millisecond))
	}
	for _, dir := range stores {
		if err := importBenchData(ctx, errOut, b.data, filepath.Join(b.out, dir), man.Counts.Tuples); err != nil {
			return man, nil, err
		}
	}
	return man, work, nil
}

// workloadName names the Zipf workload in reports.
func (b *benchSetup) workloadName() string {
	return fmt.Sprintf("zipf s=%v", b.zipf.S)
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

func newBenchGatewayCmd() *cobra.Command {
	var b benchSetup
	var cfg lab.GatewayConfig
	var noCache bool
	cmd := &cobra.Command{
		Use:   "gateway --out DIR",
		Short: "A real nginx and Caddy in front of nexus: latency through the proxy against an allow-only nexus",
		Long: `Put a real nginx (auth_request) and a real Caddy (forward_auth) in front
of nexus' forward-auth endpoint and a loopback upstream that answers at
once, and send the Zipf workload through each proxy at --rate for
--rounds rounds of --duration, interleaving nexus with its default policy,
an allow-only nexus and (unless --no-cache-run=false) nexus with its
decision cache off. Every nexus that decides is gated through each proxy
first. Reports the latency through the proxy, what nexus adds over the
allow-only nexus, nexus' own latency by cache outcome, the hit ratio,
decision-log events, the proxy's 4xx and 5xx, and nexus' CPU time and
peak memory (from /proc), in OUT/gateway.md, gateway.json and
gateway-latency.svg.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, errOut := cmd.Context(), cmd.ErrOrStderr()
			stores := []string{"nexus-data"}
			if noCache {
				stores = append(stores, "nexus-data-nocache")
			}
			_, work, err := b.prepare(ctx, errOut, stores...)
			if err != nil {
				return err
			}
			var logs []*os.File
			defer func() { closeAll(logs) }()
			starter, err := serverStarter(b.out, b.data, b.decisionLog, &logs)
			if err != nil {
				return err
			}
			cfg.Nexus = starter("nexus", "--data-dir", filepath.Join(b.out, "nexus-data"))
			if noCache {
				cfg.NoCache = starter("nexus-nocache", "--data-dir", filepath.Join(b.out, "nexus-data-nocache"), "--no-cache")
			}
			if cfg.AllowOnly, err = allowOnlyStarter(b.out, starter); err != nil {
				return err
			}
			cfg.Data, cfg.Workload, cfg.WorkloadName = b.data, work, b.workloadName()
			cfg.Work, cfg.Log = filepath.Join(b.out, "proxies"), errOut
			rep, runErr := lab.RunGateway(ctx, cfg)
			if rep == nil {
				return runErr
			}
			rep.Command = commandLine()
			if err := rep.WriteFiles(b.out); err != nil {
				return err
			}
			rep.Markdown(cmd.OutOrStdout())
			return runErr
		},
	}
	b.register(cmd, "bench-out/gateway")
	f := cmd.Flags()
	f.Float64Var(&cfg.Rate, "rate", 100, "requests per second through each proxy")
	f.DurationVar(&cfg.Duration, "duration", 20*time.Second, "measured window of each round")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds, each visiting every proxy and server")
	f.DurationVar(&cfg.Warmup, "warmup", 5*time.Second, "unmeasured window per proxy and server before the first round (negative: none)")
	f.StringSliceVar(&cfg.Proxies, "proxies", nil, "proxies (default: nginx, caddy)")
	f.IntVar(&cfg.GateSample, "gate-sample", 2000, "workload checks gated through each proxy")
	f.StringSliceVar(&cfg.GateFiles, "gate-files", []string{"rbac", "rebac3"}, "check profiles whose gate files are gated through each proxy too")
	f.BoolVar(&noCache, "no-cache-run", true, "also measure nexus with its decision cache off")
	return cmd
}

// newBenchFloorCmd is the transport floor: a bare grpc-go ext_authz
// server that allows everything, started by bench peers.
func newBenchFloorCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:    "floor --addr HOST:PORT",
		Short:  "Serve a bare grpc-go ext_authz server that allows everything (the transport floor)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "floor listening on %s\n", l.Addr())
			return lab.ServeFloor(cmd.Context(), l)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9393", "gRPC listen address")
	return cmd
}

// peerBinary finds a peer's program: in PATH or GOPATH/bin.
func peerBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	p := filepath.Join(gopath, "bin", name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s is not installed (make bench-peers installs it)", name)
	}
	return p, nil
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func newBenchPeersCmd() *cobra.Command {
	var b benchSetup
	var cfg lab.CompareConfig
	var workloads, peers []string
	var noGRPC bool
	cmd := &cobra.Command{
		Use:   "peers --out DIR",
		Short: "nexus, OPA and OpenFGA on the same data in the same run, with the allow-only nexus and the transport floor",
		Long: `Load the same data set into nexus, OPA (the data as a JSON document and
an equivalent Rego policy, POST /v1/data/nexusbench/allow) and OpenFGA
(an equivalent model and the tuples written through its API, in-memory
datastore, POST /stores/{id}/check); gate each on every workload (a peer
that answers wrongly is reported, not measured); then, in --rounds
interleaved rounds, measure P50 and P99 at a fixed rate and the capacity
at the P99 limit (x1.25 steps, then bisection) of nexus (/allowed, cache
on and off, and gRPC), OPA, OpenFGA, the allow-only nexus and a bare
grpc-go ext_authz server (the transport floor). Writes OUT/peers.md,
peers.json and SVG charts. OPA and OpenFGA are found in PATH or
GOPATH/bin (scripts/bench-peers.sh installs them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, errOut := cmd.Context(), cmd.ErrOrStderr()
			rep := &lab.PeersReport{Started: time.Now().UTC(), Command: commandLine()}
			rep.LoadAvg[0] = lab.LoadAverage()
			man, work, err := b.prepare(ctx, errOut, "nexus-data", "nexus-data-nocache")
			if err != nil {
				return err
			}
			var logs []*os.File
			defer func() { closeAll(logs) }()
			logFile := func(name string) (io.Writer, error) {
				f, err := os.Create(filepath.Join(b.out, name+".log"))
				if err != nil {
					return nil, err
				}
				logs = append(logs, f)
				return f, nil
			}
			starter, err := serverStarter(b.out, b.data, b.decisionLog, &logs)
			if err != nil {
				return err
			}
			allowOnly, err := allowOnlyStarter(b.out, starter)
			if err != nil {
				return err
			}
			var stops []func(context.Context) error
			defer func() {
				for _, s := range stops {
					_ = s(context.WithoutCancel(ctx))
				}
			}()
			pidOf := func(s lab.Server) int {
				if p, ok := s.(lab.PIDer); ok {
					return p.PID()
				}
				return 0
			}
			nexusC := func(name string, start func(context.Context) (lab.Server, error), baseline bool) ([]lab.Contender, error) {
				fmt.Fprintf(errOut, "starting %s\n", name)
				s, err := start(ctx)
				if err != nil {
					return nil, err
				}
				stops = append(stops, s.Stop)
				out := []lab.Contender{{Name: name, Target: lab.TargetConfig{Interface: lab.InterfaceAllowed, Addr: s.HTTPAddr()},
					PID: pidOf(s), MetricsURL: s.MetricsURL(), Baseline: baseline}}
				if !noGRPC {
					out = append(out, lab.Contender{Name: name + " (gRPC)", Target: lab.TargetConfig{Interface: lab.InterfaceGRPC, Addr: s.GRPCAddr()},
						PID: pidOf(s), MetricsURL: s.MetricsURL(), Baseline: baseline, FirstOnly: true})
				}
				return out, nil
			}
			var cs []lab.Contender
			for _, n := range []struct {
				name     string
				start    func(context.Context) (lab.Server, error)
				baseline bool
			}{
				{lab.TargetNexus, starter("nexus", "--data-dir", filepath.Join(b.out, "nexus-data")), false},
				{lab.TargetNoCache, starter("nexus-nocache", "--data-dir", filepath.Join(b.out, "nexus-data-nocache"), "--no-cache"), false},
				{lab.TargetAllowOnly, allowOnly, true},
			} {
				c, err := nexusC(n.name, n.start, n.baseline)
				if err != nil {
					return err
				}
				cs = append(cs, c...)
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if !noGRPC {
				addr, err := freeLoopback()
				if err != nil {
					return err
				}
				lw, err := logFile("floor")
				if err != nil {
					return err
				}
				fl, err := lab.StartChild(ctx, lab.ChildConfig{Exe: exe, Args: []string{"floor", "--addr", addr}, Log: lw, Ready: "tcp://" + addr})
				if err != nil {
					return err
				}
				stops = append(stops, fl.Stop)
				cs = append(cs, lab.Contender{Name: "floor: grpc-go allow-all", Target: lab.TargetConfig{Interface: lab.InterfaceGRPC, Addr: addr}, PID: fl.PID(), Baseline: true})
			}
			for _, peer := range peers {
				bin, err := peerBinary(peer)
				if err != nil {
					rep.Notes = append(rep.Notes, fmt.Sprintf("%s: not measured: %v.", peer, err))
					fmt.Fprintf(errOut, "%s: %v\n", peer, err)
					continue
				}
				lw, err := logFile(peer)
				if err != nil {
					return err
				}
				addr, err := freeLoopback()
				if err != nil {
					return err
				}
				fmt.Fprintf(errOut, "starting %s (%s)\n", peer, bin)
				switch peer {
				case lab.PeerOPA:
					p, err := lab.StartOPA(ctx, bin, b.data, filepath.Join(b.out, "opa"), addr, lw)
					if err != nil {
						return err
					}
					stops = append(stops, p.Stop)
					cs = append(cs, lab.Contender{Name: "OPA", Target: lab.TargetConfig{Interface: lab.InterfaceOPA, Addr: addr}, PID: p.PID()})
				case lab.PeerOpenFGA:
					gaddr, err := freeLoopback()
					if err != nil {
						return err
					}
					p, store, model, err := lab.StartOpenFGA(ctx, bin, b.data, addr, gaddr, lw)
					if err != nil {
						return err
					}
					stops = append(stops, p.Stop)
					cs = append(cs, lab.Contender{Name: "OpenFGA", Target: lab.TargetConfig{Interface: lab.InterfaceOpenFGA, Addr: addr, Store: store, Model: model}, PID: p.PID()})
				default:
					return cli.UsageError(cmd, fmt.Errorf("peer %q: want opa or openfga", peer))
				}
			}
			cfg.Contenders = cs
			for _, wl := range workloads {
				switch {
				case wl == "zipf":
					cfg.Workloads = append(cfg.Workloads, lab.Workload{Name: b.workloadName(), Checks: work, Limit: lab.DefaultRBACLimit})
				default:
					checks, err := lab.ReadChecksFile(filepath.Join(b.data, lab.GateFile(wl)))
					if err != nil {
						return cli.UsageError(cmd, fmt.Errorf("workload %q: want zipf or a gate profile: %w", wl, err))
					}
					cfg.Workloads = append(cfg.Workloads, lab.Workload{Name: wl, Checks: checks, Limit: lab.LimitFor(wl)})
				}
			}
			cfg.Log = errOut
			if cfg.Latency.Warmup == 0 {
				cfg.Latency.Warmup = -1
			}
			results, runErr := lab.Compare(ctx, cfg)
			rep.Finished, rep.Machine, rep.DataSet, rep.Results = time.Now().UTC(), lab.ThisMachine(), man, results
			rep.LoadAvg[1] = lab.LoadAverage()
			rep.Rounds, rep.LatencyRate, rep.LatencyS = cfg.Rounds, cfg.Latency.Rate, cfg.Latency.Duration.Seconds()
			rep.StepS, rep.Bisect = cfg.Capacity.Step.Seconds(), cfg.Capacity.Bisect
			rep.Notes = append(rep.Notes, b.notes...)
			if runErr != nil {
				return runErr
			}
			if err := rep.WriteFiles(b.out); err != nil {
				return err
			}
			rep.Markdown(cmd.OutOrStdout())
			fmt.Fprintf(errOut, "wrote %s\n", filepath.Join(b.out, "peers.md"))
			return nil
		},
	}
	b.register(cmd, "bench-out/peers")
	f := cmd.Flags()
	f.StringSliceVar(&workloads, "workloads", []string{"zipf", "rbac", "rebac3"}, "workloads: zipf and gate profiles (rbac, rebac0..rebac3)")
	f.StringSliceVar(&peers, "peers", []string{lab.PeerOPA, lab.PeerOpenFGA}, "peers to run next to nexus: opa, openfga")
	f.BoolVar(&noGRPC, "no-grpc", false, "leave out nexus over gRPC and the transport floor")
	f.IntVar(&cfg.Rounds, "rounds", 3, "rounds, each visiting every server in a rotated order")
	f.Float64Var(&cfg.Latency.Rate, "rate", 100, "fixed-rate run: checks per second")
	f.DurationVar(&cfg.Latency.Duration, "duration", 8*time.Second, "fixed-rate run: measured window")
	f.DurationVar(&cfg.Latency.Warmup, "warmup", 2*time.Second, "fixed-rate run: warm-up window (negative: none)")
	f.IntVar(&cfg.Latency.MaxInFlight, "latency-in-flight", lab.DefaultLatencyInFlight, "fixed-rate run: most requests in flight")
	f.Float64Var(&cfg.Capacity.StartRate, "start-rate", 400, "capacity: rate of the first step of the first round")
	f.DurationVar(&cfg.Capacity.Step, "step", 2*time.Second, "capacity: length of a step")
	f.IntVar(&cfg.Capacity.Bisect, "bisect", 3, "capacity: bisection steps between the last passing and the first failing step")
	f.IntVar(&cfg.Capacity.MaxFails, "max-fails", 1, "capacity: failing steps in a row that end the stepping")
	f.DurationVar(&cfg.Capacity.Warmup, "capacity-warmup", -1, "capacity: unjudged window at the start rate (negative: none)")
	f.IntVar(&cfg.GateSample, "gate-sample", 10000, "checks of each workload gated per server, the first ones (0: all)")
	return cmd
}
