package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// ImportData writes the data set in dir (schema and tuples) into a new
// store at dbPath. It refuses a dbPath that exists.
func ImportData(ctx context.Context, dir, dbPath string, progress func(datastore.ImportStats)) (datastore.ImportStats, error) {
	if _, err := os.Stat(dbPath); err == nil {
		return datastore.ImportStats{}, fmt.Errorf("%w: %s exists", ErrConfig, dbPath)
	}
	src, err := os.ReadFile(filepath.Join(dir, SchemaFile))
	if err != nil {
		return datastore.ImportStats{}, fmt.Errorf("bench: %w", err)
	}
	sc, err := schema.Parse(src)
	if err != nil {
		return datastore.ImportStats{}, err
	}
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o755); err != nil {
		return datastore.ImportStats{}, fmt.Errorf("bench: %w", err)
	}
	s, err := datastore.Open(ctx, datastore.Config{Path: dbPath})
	if err != nil {
		return datastore.ImportStats{}, err
	}
	if _, err := s.WriteSchema(ctx, sc, false); err != nil {
		_ = s.Close()
		return datastore.ImportStats{}, err
	}
	f, err := os.Open(filepath.Join(dir, TuplesFile))
	if err != nil {
		_ = s.Close()
		return datastore.ImportStats{}, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	st, err := s.Import(ctx, f, datastore.ImportOptions{Format: datastore.FormatText, Progress: progress})
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return st, err
}

// ReadManifest reads manifest.json of a generated directory.
func ReadManifest(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, fmt.Errorf("bench: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("bench: %s: %w", ManifestFile, err)
	}
	return m, nil
}

// Server is a running server under test.
type Server interface {
	// GRPCAddr and HTTPAddr are host:port of the listeners.
	GRPCAddr() string
	HTTPAddr() string
	// MetricsURL is the admin /metrics URL.
	MetricsURL() string
	// Stop stops the server.
	Stop(ctx context.Context) error
}

// Servers starts the servers of a run. Nexus serves the data set with
// the default policy; Baseline is an allow-only server (a policy whose
// entrypoints always allow) on the same interfaces.
type Servers struct {
	Nexus    func(ctx context.Context) (Server, error)
	Baseline func(ctx context.Context) (Server, error)
}

// RunConfig is a whole benchmark run over a generated data set.
type RunConfig struct {
	// Data is the generated directory (Generate).
	Data string
	// Profiles are the check profiles run over gRPC; nil means all five.
	Profiles []string
	// Interfaces nil means grpc, allowed and authzen.
	Interfaces []string
	// HTTPProfiles are the profiles run over the HTTP interfaces; nil
	// means rbac and rebac3.
	HTTPProfiles []string
	// Latency and Capacity configure the runs (their Limit, Expect and
	// MetricsURL are set per target).
	Latency  LatencyConfig
	Capacity CapacityConfig
	// Conns is TargetConfig.Conns of every target.
	Conns int
	// Client is TargetConfig.Client of every gRPC target.
	Client string
	// SkipLatency, SkipCapacity leave a kind of run out.
	SkipLatency, SkipCapacity bool
	// Servers starts the servers; Baseline nil skips the baseline.
	Servers Servers
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Command is recorded in the report.
	Command string
}

// Run generates nothing: it starts the servers, gates every profile and
// runs latency and capacity, and returns the report. A failed gate stops
// the run with ErrGateFailed (the report holds the wrong checks).
func Run(ctx context.Context, cfg RunConfig) (*Report, error) {
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	logf := func(format string, a ...any) { fmt.Fprintf(log, format+"\n", a...) }
	if cfg.Servers.Nexus == nil {
		return nil, fmt.Errorf("%w: RunConfig.Servers.Nexus is required", ErrConfig)
	}
	profiles := cfg.Profiles
	if profiles == nil {
		profiles = GateProfiles
	}
	ifaces := cfg.Interfaces
	if ifaces == nil {
		ifaces = Interfaces
	}
	httpProfiles := cfg.HTTPProfiles
	if httpProfiles == nil {
		httpProfiles = []string{"rbac", "rebac3"}
	}
	man, err := ReadManifest(cfg.Data)
	if err != nil {
		return nil, err
	}
	checks, err := readGates(cfg.Data, profiles, httpProfiles)
	if err != nil {
		return nil, err
	}
	rep := &Report{Started: time.Now().UTC(), Machine: machine(), Command: cfg.Command, DataSet: man}
	logf("starting nexus")
	nx, err := cfg.Servers.Nexus(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = nx.Stop(context.WithoutCancel(ctx)) }()
	var base Server
	if cfg.Servers.Baseline != nil {
		logf("starting the allow-only baseline")
		if base, err = cfg.Servers.Baseline(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = base.Stop(context.WithoutCancel(ctx)) }()
	}
	for _, iface := range ifaces {
		ps := profiles
		if iface != InterfaceGRPC {
			ps = httpProfiles
		}
		var tgts []runTarget
		for _, p := range ps {
			tgts = append(tgts, runTarget{iface, "nexus", p, nx})
		}
		if base != nil && len(ps) > 0 {
			tgts = append(tgts, runTarget{iface, "baseline", ps[0], base})
		}
		for _, tg := range tgts {
			r, err := tg.run(ctx, cfg, checks[tg.profile], logf)
			if r != nil {
				rep.Results = append(rep.Results, *r)
			}
			if err != nil {
				return rep, err
			}
		}
	}
	rep.Finished = time.Now().UTC()
	return rep, nil
}

// readGates reads the gate file of every profile of a run.
func readGates(dir string, profiles, httpProfiles []string) (map[string][]Check, error) {
	checks := map[string][]Check{}
	for _, p := range append(slices.Clip(profiles), httpProfiles...) {
		if checks[p] != nil {
			continue
		}
		cs, err := ReadChecksFile(filepath.Join(dir, GateFile(p)))
		if err != nil {
			return nil, err
		}
		checks[p] = cs
	}
	return checks, nil
}

// runTarget is one server measured over one interface with the requests
// of one profile: nexus (gated first), or the baseline.
type runTarget struct {
	iface, name, profile string
	srv                  Server
}

// run gates (nexus only) and measures the target. The result is nil
// when nothing was measured; a failed gate returns it with the error.
func (tg runTarget) run(ctx context.Context, cfg RunConfig, cs []Check, logf func(string, ...any)) (*Result, error) {
	addr := tg.srv.HTTPAddr()
	if tg.iface == InterfaceGRPC {
		addr = tg.srv.GRPCAddr()
	}
	t, err := NewTarget(TargetConfig{Interface: tg.iface, Addr: addr, Conns: cfg.Conns, Client: cfg.Client})
	if err != nil {
		return nil, err
	}
	defer func() { _ = t.Close() }()
	r := Result{Interface: tg.iface, Profile: tg.profile, Target: tg.name}
	nexus := tg.name == "nexus"
	if !nexus {
		r.Profile = "allow-only (" + tg.profile + " requests)"
	}
	if nexus {
		g, err := Gate(ctx, t, cs)
		r.Gate = &g
		if err != nil {
			return &r, err
		}
		logf("%s %s: gate %s", tg.iface, tg.profile, g.Summary())
	}
	reqs, err := t.Prepare(cs)
	if err != nil {
		return nil, err
	}
	if !cfg.SkipLatency {
		lc := cfg.Latency
		lc.Expect, lc.MetricsURL = nexus, tg.srv.MetricsURL()
		lr, err := Latency(ctx, t, reqs, lc)
		if err != nil {
			return nil, err
		}
		r.Latency = &lr
		logf("%s %s %s: latency at %.0f/s: client P50 %.3f P99 %.3f ms; server P99 %s", tg.iface, tg.name, tg.profile,
			lr.Load.OfferedRate, lr.Load.Client.P50, lr.Load.Client.P99, serverP99(lr.Server))
	}
	if !cfg.SkipCapacity {
		cc := cfg.Capacity
		cc.Expect, cc.MetricsURL = nexus, tg.srv.MetricsURL()
		cc.Limit = LimitFor(tg.profile)
		cc.Progress = func(s Step) {
			verdict := "pass"
			if !s.Passed {
				verdict = "FAIL: " + s.Reason
			}
			logf("  %s %s %s: step %.0f/s: achieved %.0f/s, P99 %.3f ms, dropped %d, failed %d: %s", tg.iface, tg.name, tg.profile,
				s.Load.OfferedRate, s.Load.AchievedRate, s.Load.Client.P99, s.Load.Dropped, s.Load.Failed, verdict)
		}
		cr, err := Capacity(ctx, t, reqs, cc)
		if err != nil {
			return nil, err
		}
		r.Capacity = &cr
		logf("%s %s %s: capacity %.0f/s", tg.iface, tg.name, tg.profile, cr.Capacity)
	}
	return &r, nil
}

func serverP99(s *ServerStats) string {
	if s == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f ms", s.Latency.P99)
}

// Machine describes where a run happened.
type Machine struct {
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu,omitempty"`
	OS         string `json:"os"`
	Go         string `json:"go"`
	Hostname   string `json:"hostname,omitempty"`
}

// ThisMachine describes the machine the process runs on.
func ThisMachine() Machine { return machine() }

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
