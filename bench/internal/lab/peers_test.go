package lab

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/nexuspdp/nexus/internal/freeport"
)

// peerChecks are the checks a peer must answer right on the small data
// set: the first perGate checks of every gate file (half of them allowed)
// and the first checks of the Zipf workload.
func peerChecks(t *testing.T, dir string, perGate, zipf int) []Check {
	t.Helper()
	var all []Check
	for _, p := range GateProfiles {
		cs, err := ReadChecksFile(filepath.Join(dir, GateFile(p)))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, cs[:min(perGate, len(cs))]...)
	}
	path, err := GenerateZipf(context.Background(), dir, ZipfConfig{S: 1.1, Distinct: zipf})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := ReadChecksFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return append(all, cs...)
}

// TestOPAPeerAnswersTheGate evaluates the OPA peer's policy and data with
// OPA's own evaluator on every check of a small generated data set.
func TestOPAPeerAnswersTheGate(t *testing.T) {
	dir, _ := genSmall(t, 1)
	checks := peerChecks(t, dir, GateChecks, 3000)
	b, err := OPAData(dir)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pq, err := rego.New(
		rego.Query("data.nexusbench.allow"),
		rego.Module("nexusbench.rego", string(OPAPolicy)),
		rego.Store(inmem.NewFromObject(data)),
	).PrepareForEval(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wrong, allowed := 0, 0
	for _, c := range checks {
		in := opaInput(c)["input"]
		rs, err := pq.Eval(ctx, rego.EvalInput(in))
		if err != nil {
			t.Fatal(err)
		}
		got := len(rs) == 1 && rs[0].Expressions[0].Value == true
		if got {
			allowed++
		}
		if got != c.Allow {
			if wrong++; wrong <= 5 {
				t.Errorf("%+v: OPA says %v", c, got)
			}
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of %d checks wrong", wrong, len(checks))
	}
	if allowed == 0 || allowed == len(checks) {
		t.Fatalf("%d of %d allowed: the checks do not tell allow from deny", allowed, len(checks))
	}
}

// requireTool finds a peer program in PATH or GOPATH/bin; it skips the
// test when the program is missing, and fails it under
// NEXUS_REQUIRE_TOOLS=1.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(string(trimNL(out)), "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("NEXUS_REQUIRE_TOOLS") == "1" {
		t.Fatalf("%s is not installed (scripts/bench-peers.sh installs it) and NEXUS_REQUIRE_TOOLS=1", name)
	}
	t.Skipf("%s is not installed (scripts/bench-peers.sh installs it)", name)
	return ""
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// TestOpenFGAPeerAnswersTheGate loads the small data set into a real
// OpenFGA (in-memory datastore) through its API and sends every gate
// check and the first Zipf checks over POST /stores/{id}/check.
func TestOpenFGAPeerAnswersTheGate(t *testing.T) {
	bin := requireTool(t, "openfga")
	dir, _ := genSmall(t, 1)
	// OpenFGA's in-memory datastore scans the store's tuples on every
	// read: a few hundred checks keep the test short.
	checks := peerChecks(t, dir, 50, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	gaddr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "openfga.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	start := time.Now()
	p, store, model, err := StartOpenFGA(ctx, bin, dir, addr, gaddr, logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("OpenFGA started and loaded in %v", time.Since(start))
	defer p.Stop(context.Background())
	tg, err := NewTarget(TargetConfig{Interface: InterfaceOpenFGA, Addr: addr, Store: store, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	start = time.Now()
	res, err := Gate(ctx, tg, checks)
	t.Logf("%d checks in %v", len(checks), time.Since(start))
	if err != nil {
		for _, w := range res.Wrong[:min(5, len(res.Wrong))] {
			t.Errorf("%+v: got %v %s", w.Check, w.Got, w.Error)
		}
		t.Fatal(err)
	}
}
