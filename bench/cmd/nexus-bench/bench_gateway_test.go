package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nexuspdp/nexus/bench/internal/lab"
)

// TestBenchGatewayEndToEnd builds nexus and nexus-bench and runs a short
// `nexus-bench gateway` with the real nginx and Caddy: every nexus behind
// every proxy passes the gate, every request gets an answer, and the
// report counts what happened.
func TestBenchGatewayEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts nginx and Caddy")
	}
	for _, p := range lab.GatewayProxies {
		if _, err := lab.ProxyBinary(p); err != nil {
			t.Fatalf("%v", err)
		}
	}
	dir := t.TempDir()
	exe, nexus := filepath.Join(dir, "nexus-bench"), filepath.Join(dir, "nexus")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	build := exec.Command("go", "build", "-o", nexus, "./cmd/nexus")
	build.Dir = filepath.Join("..", "..", "..") // the product module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build nexus: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.Command(exe, "gateway", "--nexus", nexus, "--rate", "20", "--duration", "2s", "--rounds", "1", "--warmup", "-1s",
		"--distinct", "2000", "--gate-sample", "500", "--gate-files", "rbac", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nexus-bench gateway: %v\n%s", err, stderr.String())
	}
	if !bytes.Contains(stdout.Bytes(), []byte("| nginx | nexus |")) || !bytes.Contains(stdout.Bytes(), []byte("| caddy | nexus |")) {
		t.Fatalf("the printed tables lack a proxy:\n%s", stdout.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "gateway.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep lab.GatewayReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 6 {
		t.Fatalf("%d results, want 2 proxies x 3 servers", len(rep.Results))
	}
	for _, r := range rep.Results {
		name := r.Proxy + " " + r.Target
		if r.Target != lab.TargetAllowOnly && (r.Gate == nil || !r.Gate.Passed() || r.Gate.Checks != 1500) {
			t.Errorf("%s: gate %+v, want 1,500 right", name, r.Gate)
		}
		if len(r.Rounds) != 1 {
			t.Fatalf("%s: %d rounds", name, len(r.Rounds))
		}
		rd := r.Rounds[0]
		l := rd.Load
		if l.Completed < 30 || l.Failed != 0 || l.HTTP5xx != 0 || l.HTTP4xx != 0 || l.Wrong != 0 && r.Target != lab.TargetAllowOnly {
			t.Errorf("%s: %+v", name, l)
		}
		switch r.Target {
		case lab.TargetAllowOnly:
			if l.Allowed != l.Completed {
				t.Errorf("%s: %d of %d allowed", name, l.Allowed, l.Completed)
			}
		default:
			if l.Allowed == 0 || l.Allowed == l.Completed {
				t.Errorf("%s: %d of %d allowed: the Zipf workload has both decisions", name, l.Allowed, l.Completed)
			}
		}
		s := rd.Server
		if s == nil || s.Decisions < float64(l.Completed) || s.LogEmitted < float64(l.Completed) {
			t.Errorf("%s: server figures %+v for %d requests", name, s, l.Completed)
			continue
		}
		_, disabled := s.ByCache["disabled"]
		if (r.Target == lab.TargetNoCache) != disabled {
			t.Errorf("%s: cache outcomes %v", name, s.ByCache)
		}
		if rd.PeakRSSBytes < 1<<20 {
			t.Errorf("%s: peak memory %.0f bytes", name, rd.PeakRSSBytes)
		}
	}
	svg, err := os.ReadFile(filepath.Join(out, "gateway-latency.svg"))
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("gateway-latency.svg: %v", err)
		}
	}
}
