package lab

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartProxyRelativeDir: a proxy started in a directory named
// relatively (as `make bench` names bench-out) finds its configuration;
// it runs in that directory, so a relative path would be doubled.
func TestStartProxyRelativeDir(t *testing.T) {
	for _, kind := range []string{ProxyNginx, ProxyCaddy} {
		t.Run(kind, func(t *testing.T) {
			if _, err := ProxyBinary(kind); err != nil {
				t.Skip(err)
			}
			t.Chdir(t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := StartProxy(ctx, ProxyConfig{Kind: kind, Nexus: "127.0.0.1:1", Upstream: "127.0.0.1:1", Dir: "out/proxy", Log: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Stop(ctx) }()
			if _, err := os.Stat("out/proxy"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGatewayReportFailedGate writes the report of a run that stopped at
// a failed gate (one result, no rounds): the files are written and the
// table shows the gate. Its chart has no value to scale.
func TestGatewayReportFailedGate(t *testing.T) {
	rep := &GatewayReport{Rate: 100, Duration: 2, Workload: "zipf", Results: []GatewayResult{
		{Proxy: ProxyCaddy, Target: TargetNoCache, Gate: &GateResult{Checks: 10, Right: 7}},
	}}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| caddy | "+TargetNoCache+" | 7/10 |") {
		t.Fatalf("the table does not show the failed gate:\n%s", md)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "gateway-latency.svg"))
	if err != nil {
		t.Fatal(err)
	}
	svgElements(t, svg)
}
