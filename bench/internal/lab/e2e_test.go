package lab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/nexuspdp/nexus/bench/internal/labtest"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"
)

var allowBundle = sync.OnceValues(func() (*bundle.Bundle, error) {
	sub, err := fs.Sub(allowAll, "allowall")
	if err != nil {
		return nil, err
	}
	return labtest.Compile(sub, []string{"authz.rego", "envoy.rego"}, "", "allowall")
})

// inproc is a real server in the test process.
type inproc = labtest.Server

// startInproc starts a server on the data set in dataDir (imported into a
// fresh store), with the default policy or, for the baseline, the
// allow-only one on an empty store.
func startInproc(t testing.TB, dataDir string, baseline bool) *inproc {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "nexus.db")
	var b *bundle.Bundle
	var err error
	if baseline {
		b, err = allowBundle()
	} else {
		b, err = labtest.DefaultBundle()
		if err == nil {
			_, err = ImportData(ctx, dataDir, db, nil)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	store, err := datastore.Open(ctx, datastore.Config{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	return labtest.Start(t, store, b,
		// generous: the test machine is shared and -race is slow
		pdp.Config{EvalTimeout: 5 * time.Second},
		extauthz.Config{AdminToken: "bench-admin-token-0123456789", AppAPIInsecure: true})
}

var smallData = sync.OnceValues(func() (string, error) {
	dir, err := tempDirOutsideTest()
	if err != nil {
		return "", err
	}
	_, err = Generate(context.Background(), GenConfig{Profile: Profiles["small"], Seed: 1, Out: dir})
	return dir, err
})

// TestGateSmallAgainstServer verifies every expected decision of the
// small data set's gate files against the real server and the real
// default policy, over every interface.
func TestGateSmallAgainstServer(t *testing.T) {
	dir, err := smallData()
	if err != nil {
		t.Fatal(err)
	}
	srv := startInproc(t, dir, false)
	for _, iface := range Interfaces {
		profiles := GateProfiles
		if iface != InterfaceGRPC {
			profiles = []string{"rbac", "rebac3"}
			if raceEnabled {
				profiles = profiles[:1]
			}
		}
		for _, p := range profiles {
			t.Run(iface+"/"+p, func(t *testing.T) {
				checks, err := ReadChecksFile(filepath.Join(dir, GateFile(p)))
				if err != nil {
					t.Fatal(err)
				}
				addr := srv.HTTPAddr()
				if iface == InterfaceGRPC {
					addr = srv.GRPCAddr()
				}
				tg, err := NewTarget(TargetConfig{Interface: iface, Addr: addr})
				if err != nil {
					t.Fatal(err)
				}
				defer tg.Close()
				res, err := Gate(context.Background(), tg, checks)
				if err != nil {
					t.Fatalf("%v; first wrong: %+v", err, res.Wrong[:min(3, len(res.Wrong))])
				}
				if res.Right != GateChecks {
					t.Fatalf("right = %d, want %d", res.Right, GateChecks)
				}
			})
		}
	}
	t.Run("dropped", func(t *testing.T) { loadDropped(t, dir, srv) })
	t.Run("capacity stops after two failing steps", func(t *testing.T) {
		checks, err := ReadChecksFile(filepath.Join(dir, GateFile("rbac")))
		if err != nil {
			t.Fatal(err)
		}
		tg, err := NewTarget(TargetConfig{Interface: InterfaceGRPC, Addr: srv.GRPCAddr()})
		if err != nil {
			t.Fatal(err)
		}
		defer tg.Close()
		reqs, err := tg.Prepare(checks)
		if err != nil {
			t.Fatal(err)
		}
		// no answer comes back within a nanosecond: every step fails
		res, err := Capacity(context.Background(), tg, reqs, CapacityConfig{StartRate: 50, Step: 200 * time.Millisecond, Warmup: -1, Limit: time.Nanosecond, Expect: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Steps) != 2 || res.Capacity != 0 || res.Best != nil || res.Steps[1].Load.OfferedRate != 62.5 {
			t.Fatalf("steps %d, capacity %v, best %v", len(res.Steps), res.Capacity, res.Best)
		}
	})
	// a wrong expectation fails the gate and is listed
	checks, err := ReadChecksFile(filepath.Join(dir, GateFile("rbac")))
	if err != nil {
		t.Fatal(err)
	}
	checks = checks[:10]
	checks[3].Allow = !checks[3].Allow
	tg, err := NewTarget(TargetConfig{Interface: InterfaceGRPC, Addr: srv.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	res, err := Gate(context.Background(), tg, checks)
	if !errors.Is(err, ErrGateFailed) || len(res.Wrong) != 1 || res.Wrong[0].Line != 4 {
		t.Fatalf("gate with one wrong expectation: err %v, wrong %+v", err, res.Wrong)
	}
}

// TestRun runs the whole orchestration against in-process servers with
// very short windows and checks the report.
func TestRun(t *testing.T) {
	dir, err := smallData()
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	cfg := RunConfig{
		Data: dir, Profiles: []string{"rbac", "rebac3"}, HTTPProfiles: []string{"rbac"},
		Interfaces: []string{InterfaceGRPC, InterfaceAllowed},
		Latency:    LatencyConfig{Rate: 100, Warmup: 200 * time.Millisecond, Duration: time.Second},
		Capacity:   CapacityConfig{StartRate: 100, Step: 400 * time.Millisecond, MaxSteps: 2},
		Servers: Servers{
			Nexus:    func(context.Context) (Server, error) { return startInproc(t, dir, false), nil },
			Baseline: func(context.Context) (Server, error) { return startInproc(t, dir, true), nil },
		},
		Log: &log, Command: "test",
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(rep.Results) != 5 {
		t.Fatalf("results = %d, want 5 (grpc: rbac, rebac3, baseline; allowed: rbac, baseline)", len(rep.Results))
	}
	for _, r := range rep.Results {
		name := r.Interface + "/" + r.Target + "/" + r.Profile
		if r.Target == "nexus" && (r.Gate == nil || !r.Gate.Passed()) {
			t.Errorf("%s: gate %+v", name, r.Gate)
		}
		l := r.Latency
		if l == nil || l.Server == nil {
			t.Fatalf("%s: no latency or server figures", name)
		}
		if l.Load.Completed < 90 || l.Load.Failed != 0 || l.Load.Client.P50 <= 0 || l.Load.Client.P99 < l.Load.Client.P50 {
			t.Errorf("%s: latency load %+v", name, l.Load)
		}
		if l.Server.Decisions < float64(l.Load.Completed) || l.Server.Latency.Count == 0 || l.Server.Latency.P99 <= 0 {
			t.Errorf("%s: server figures %+v for %d completed", name, l.Server, l.Load.Completed)
		}
		if l.Server.CPUSeconds <= 0 || l.Server.PeakRSSBytes <= 0 {
			t.Errorf("%s: CPU %v s, peak RSS %v", name, l.Server.CPUSeconds, l.Server.PeakRSSBytes)
		}
		// the machine is shared: a step may fail, but the run must be consistent
		c := r.Capacity
		switch {
		case c == nil || len(c.Steps) == 0:
			t.Errorf("%s: no capacity steps", name)
		case c.Steps[0].Passed && (c.Capacity < 100 || c.Best == nil):
			t.Errorf("%s: first step passed, capacity %v", name, c.Capacity)
		case !c.Steps[0].Passed && c.Steps[0].Reason == "":
			t.Errorf("%s: first step failed (%q) yet capacity %v and %d steps", name, c.Steps[0].Reason, c.Capacity, len(c.Steps))
		case len(c.Steps) == 2 && c.Steps[1].Load.OfferedRate != 125:
			t.Errorf("%s: second step at %v/s, want 125", name, c.Steps[1].Load.OfferedRate)
		}
		// The gate asked every check already; the policy reads neither
		// the request ID, fresh in every gRPC request, nor the other
		// headers the generator sends, so repeated checks hit the cache
		// on every interface.
		if r.Target == "nexus" && l.Server.CacheHitRatio == 0 {
			t.Errorf("%s: no cache hits for repeated checks", name)
		}
	}
	var md strings.Builder
	rep.Markdown(&md)
	for _, want := range []string{"| rbac | nexus | 1000/1000 |", "allow-only", "Against Permit's Nexus PDP", "| rebac3 | 9.00-11.0 |", "Goals of these benchmarks"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if err := rep.WriteFiles(t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// loadDropped: with one request in flight and arrivals far faster than
// the server answers, arrivals are dropped and counted, and every arrival
// is either sent or dropped.
func loadDropped(t *testing.T, dir string, srv *inproc) {
	t.Helper()
	checks, err := ReadChecksFile(filepath.Join(dir, GateFile("rebac3")))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := NewTarget(TargetConfig{Interface: InterfaceGRPC, Addr: srv.GRPCAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	reqs, err := tg.Prepare(checks)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Load(context.Background(), tg, reqs, LoadConfig{Rate: 20000, MaxInFlight: 1, Duration: 300 * time.Millisecond, Expect: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 6000 || res.Sent+res.Dropped != res.Scheduled || res.Completed != res.Sent {
		t.Fatalf("scheduled %d, sent %d, dropped %d, completed %d", res.Scheduled, res.Sent, res.Dropped, res.Completed)
	}
	if res.Dropped == 0 || res.Failed != 0 || res.Wrong != 0 {
		t.Fatalf("dropped %d, failed %d, wrong %d", res.Dropped, res.Failed, res.Wrong)
	}
	if ok, _ := Judge(res, time.Second, DefaultMaxDropped); ok {
		t.Fatalf("a step with %.0f%% dropped passed", 100*res.DroppedRatio())
	}
}

// TestRequestID: a prepared gRPC check is one CheckRequest as Envoy
// writes it (its attributes field once, so the server decodes it as it
// decodes Envoy's), and each send's ID lands in the request's id and its
// x-request-id header, the rest of the request unchanged.
func TestRequestID(t *testing.T) {
	c := Check{User: "u1", Action: "write", Type: "file", ID: "f9", Tenant: "t2"}
	tg := &Target{idPrefix: "bench-x-"}
	r, err := tg.prepareGRPC(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{0, 42, 1<<64 - 1} {
		msg := tg.stamped(nil, &r, seq)
		attrs := 0
		for b := msg; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				t.Fatal(protowire.ParseError(n))
			}
			if num != 1 || typ != protowire.BytesType {
				t.Fatalf("top-level field %d (type %d)", num, typ)
			}
			attrs++
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				t.Fatal(protowire.ParseError(m))
			}
			b = b[n+m:]
		}
		if attrs != 1 {
			t.Fatalf("attributes written %d times", attrs)
		}
		var got authv3.CheckRequest
		if err := proto.Unmarshal(msg, &got); err != nil {
			t.Fatal(err)
		}
		id := "bench-x-" + fmt.Sprintf("%013s", strconv.FormatUint(seq, 36))
		if want := envoyRequest(c, id); !proto.Equal(&got, want) {
			t.Fatalf("seq %d: got %v, want %v", seq, &got, want)
		}
	}
}

// TestLeanClient: the generator's own HTTP/2 client gives the same
// decisions as grpc-go's, carries gRPC errors with their codes, and gives
// up at the call's deadline.
func TestLeanClient(t *testing.T) {
	dir, err := smallData()
	if err != nil {
		t.Fatal(err)
	}
	srv := startInproc(t, dir, false)
	checks, err := ReadChecksFile(filepath.Join(dir, GateFile("rebac3")))
	if err != nil {
		t.Fatal(err)
	}
	checks = checks[:200]
	for _, client := range []string{ClientLean, ClientGRPCGo} {
		tg, err := NewTarget(TargetConfig{Interface: InterfaceGRPC, Addr: srv.GRPCAddr(), Client: client, Conns: 2})
		if err != nil {
			t.Fatal(err)
		}
		reqs, err := tg.Prepare(checks)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		got := make([]bool, len(reqs))
		errs := make([]error, len(reqs))
		for i := range reqs {
			wg.Go(func() {
				o := tg.Send(context.Background(), &reqs[i])
				got[i], errs[i] = o.Allowed, o.Err
			})
		}
		wg.Wait()
		tg.Close()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: check %d: %v", client, i, err)
			}
			if got[i] != checks[i].Allow {
				t.Fatalf("%s: check %d allowed=%v, want %v", client, i, got[i], checks[i].Allow)
			}
		}
	}

	ctx := context.Background()
	c, err := dialH2(ctx, srv.GRPCAddr(), "/no.Such/Method")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if _, err := c.call(ctx, nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	c2, err := dialH2(ctx, srv.GRPCAddr(), checkMethod)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.close()
	if _, err := c2.call(done, nil); status.Code(err) != codes.Canceled {
		t.Fatalf("canceled call: %v, want Canceled", err)
	}
	c2.close()
	if _, err := c2.call(ctx, nil); err == nil {
		t.Fatal("a call on a closed connection succeeded")
	}
}
