package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// compatDir is the opa-envoy-plugin compatibility suite of the main
// module: policies, CheckRequests and the CheckResponses written by hand
// from reading the plugin's source.
var compatDir = filepath.Join(nexusproc.RepoRoot(), "extauthz", "internal", "envoygrpc", "testdata", "compat")

// pluginBinary is an opa-envoy-plugin binary named by $OPA_ENVOY_PLUGIN.
// The plugin is not published as a Go module that `go install` can fetch,
// so it is optional: build it from its repository
// (go build ./cmd/opa-envoy-plugin) and point the variable at it.
func pluginBinary(t testing.TB) string {
	t.Helper()
	p := os.Getenv("OPA_ENVOY_PLUGIN")
	if p == "" {
		const why = "OPA_ENVOY_PLUGIN names no opa-envoy-plugin binary (build one with go build ./cmd/opa-envoy-plugin in its repository)"
		if tt, ok := t.(*testing.T); ok {
			skipNoted(tt, why)
		}
		t.Skip(why)
	}
	return p
}

// policyDir copies a suite's policy and data (not its requests, which OPA
// would load as data) into a new directory.
func policyDir(t testing.TB, suite string) string {
	t.Helper()
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(suite, "*.rego"))
	if d := filepath.Join(suite, "data.json"); fileExists(d) {
		files = append(files, d)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// startPlugin runs opa-envoy-plugin on policy with decision logs on (the
// plugin makes a decision_id only then) and waits for its health.
func startPlugin(t testing.TB, bin, policy string, extra ...string) (grpcAddr string, cmd *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	grpcAddr = nexusproc.FreeAddr(t)
	httpAddr := nexusproc.FreeAddr(t)
	cfg := filepath.Join(dir, "config.yaml")
	conf := "plugins:\n  envoy_ext_authz_grpc:\n    addr: " + grpcAddr + "\n    path: envoy/authz/allow\n" + strings.Join(extra, "\n") + "\n"
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "run", "--server", "--addr="+httpAddr, "--config-file="+cfg, policy)
	logf, err := os.Create(filepath.Join(dir, "plugin.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	waitHTTP(t, "http://"+httpAddr+"/health?plugins", filepath.Join(dir, "plugin.log"))
	return grpcAddr, cmd
}

func waitHTTP(t testing.TB, url, logFile string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(logFile)
	t.Fatalf("%s not healthy after 60s\n%s", url, b)
}

// TestCompatExpectationsAgainstPlugin sends every request of the
// compatibility suite to a real opa-envoy-plugin and compares its whole
// CheckResponse with the response the suite expects (which nexus' own
// test compares nexus against). The plugin sends the headers of one
// object in Go's map order, so headers are compared as sorted lists.
func TestCompatExpectationsAgainstPlugin(t *testing.T) {
	bin := pluginBinary(t)
	suites, _ := filepath.Glob(filepath.Join(compatDir, "*"))
	cases := 0
	for _, suite := range suites {
		if st, err := os.Stat(suite); err != nil || !st.IsDir() {
			continue
		}
		t.Run(filepath.Base(suite), func(t *testing.T) {
			addr, _ := startPlugin(t, bin, policyDir(t, suite), "decision_logs:\n  console: true")
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			client := authv3.NewAuthorizationClient(conn)
			reqs, _ := filepath.Glob(filepath.Join(suite, "*.request.json"))
			for _, file := range reqs {
				base := strings.TrimSuffix(file, ".request.json")
				cases++
				t.Run(filepath.Base(base), func(t *testing.T) { pluginCase(t, client, base) })
			}
		})
	}
	if cases < 40 {
		t.Fatalf("only %d cases found under %s", cases, compatDir)
	}
}

func pluginCase(t *testing.T, client authv3.AuthorizationClient, base string) {
	raw, err := os.ReadFile(base + ".request.json")
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := client.Check(ctx, req)
	if b, rerr := os.ReadFile(base + ".error"); rerr == nil {
		want, msg, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if err == nil || status.Code(err).String() != want {
			t.Fatalf("plugin answered %v, %v; the suite expects a gRPC error %s", got, err, want)
		}
		if msg != "" && status.Convert(err).Message() != msg {
			t.Fatalf("plugin: gRPC error message %q, the suite expects %q", status.Convert(err).Message(), msg)
		}
		return
	}
	if err != nil {
		t.Fatalf("plugin: %v", err)
	}
	gotJSON, err := protojson.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := os.ReadFile(base + ".response.json")
	if err != nil {
		t.Fatal(err)
	}
	g, w := normalResponse(t, gotJSON), normalResponse(t, wantJSON)
	if g != w {
		t.Fatalf("the suite's expected response differs from the plugin's\nplugin: %s\nsuite:  %s", g, w)
	}
}

// normalResponse re-encodes a CheckResponse in protojson with the
// decision_id's value replaced by its presence and every list of headers
// or query parameters sorted.
func normalResponse(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(any) any
	walk = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "decision_id" {
					x[k] = "present"
					continue
				}
				x[k] = walk(e)
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
			sort.SliceStable(x, func(i, j int) bool {
				a, _ := json.Marshal(x[i])
				b, _ := json.Marshal(x[j])
				return string(a) < string(b)
			})
		}
		return x
	}
	out, _ := json.Marshal(walk(v))
	return string(out)
}

// BenchmarkSideBySide sends the rbac-headers suite's requests over gRPC,
// from as many goroutines as GOMAXPROCS×4, to nexus started with `nexus
// run` and to opa-envoy-plugin started with the same arguments, in
// alternate sub-benchmarks, and reports each server's CPU time per check
// (from /proc) besides the client-side ns/op. Decision logs are off in
// both; nexus runs with its decision cache on and off.
//
//	OPA_ENVOY_PLUGIN=/path/to/opa-envoy-plugin go test -run '^$' -bench SideBySide -count 3 ./e2e/
func BenchmarkSideBySide(b *testing.B) {
	bin := pluginBinary(b)
	suite := filepath.Join(compatDir, "rbac-headers")
	policy := policyDir(b, suite)
	var reqs []*authv3.CheckRequest
	files, _ := filepath.Glob(filepath.Join(suite, "*.request.json"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		r := &authv3.CheckRequest{}
		if err := protojson.Unmarshal(raw, r); err != nil {
			b.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	for _, srv := range []string{"opa-envoy-plugin", "nexus/cache=on", "nexus/cache=off"} {
		b.Run(srv, func(b *testing.B) {
			var addr string
			var pid int
			if srv == "opa-envoy-plugin" {
				a, cmd := startPlugin(b, bin, policy)
				addr, pid = a, cmd.Process.Pid
			} else {
				addr, pid = startNexusRun(b, policy, srv == "nexus/cache=off")
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := authv3.NewAuthorizationClient(conn)
			for _, r := range reqs { // warm up, and every request must be answered
				if _, err := client.Check(context.Background(), r); err != nil && status.Code(err) == 0 {
					b.Fatal(err)
				}
			}
			var i atomic.Uint64
			cpu0 := procCPU(b, pid)
			b.ResetTimer()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := reqs[i.Add(1)%uint64(len(reqs))]
					if _, err := client.Check(context.Background(), r); err != nil && status.Code(err) != 2 {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((procCPU(b, pid)-cpu0).Nanoseconds())/float64(b.N)/1000, "server-cpu-µs/check")
		})
	}
}

// startNexusRun starts nexus with opa run's arguments on policy.
func startNexusRun(b *testing.B, policy string, noCache bool) (string, int) {
	dir := b.TempDir()
	grpcAddr, httpAddr, diag := nexusproc.FreeAddr(b), nexusproc.FreeAddr(b), nexusproc.FreeAddr(b)
	conf := "plugins:\n  envoy_ext_authz_grpc:\n    addr: " + grpcAddr + "\n    path: envoy/authz/allow\n"
	if noCache {
		conf += "nexus:\n  cache_disabled: true\n"
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	p := nexusproc.Start(b, dir, diag, "run", "--server", "--addr="+httpAddr, "--diagnostic-addr="+diag, "--config-file="+cfg, policy)
	return grpcAddr, p.Cmd.Process.Pid
}

var clockTicks = sync.OnceValue(func() float64 { return 100 }) // USER_HZ on Linux

// procCPU is a process' user and system CPU time from /proc/PID/stat.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return time.Duration((ut + st) / clockTicks() * float64(time.Second))
}
