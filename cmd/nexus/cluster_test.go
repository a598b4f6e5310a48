package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/demo"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
	"github.com/nexuspdp/nexus/pdp"
)

const (
	testAdminToken = "cluster-test-admin-token"
	testAppKey     = "cluster-test-app-key"
)

// serving is one `nexus serve` run inside the test process.
type serving struct {
	admin, http string
	log         *fixture.SyncBuffer // the serve run's log
	cancel      context.CancelFunc
	done        chan error
	stopped     sync.Once
}

// serve runs `nexus serve` with args and the test's credentials until the
// test ends. Its listeners take ports the kernel chooses, so no other
// process can take them between a choice and the bind; ready waits for
// /readyz and reads their addresses from the log.
func serve(t *testing.T, dataDir string, args ...string) *serving {
	t.Helper()
	s := &serving{log: &fixture.SyncBuffer{}, done: make(chan error, 1)}
	cmd := newServeCmd()
	cmd.SetArgs(append([]string{
		"--data-dir", dataDir, "--grpc-addr", "-", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--admin-token", testAdminToken, "--app-api-key", testAppKey, "--shutdown-grace", "2s",
	}, args...))
	cmd.SetOut(s.log)
	cmd.SetErr(s.log)
	cmd.SilenceUsage = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			t.Logf("serve %s log:\n%s", dataDir, s.log.String())
		}
	})
	return s
}

func (s *serving) stop(t *testing.T) {
	t.Helper()
	s.stopped.Do(func() {
		s.cancel()
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not stop")
		}
	})
}

// readAddrs takes the listeners' addresses from the log once they are there.
func (s *serving) readAddrs() {
	for _, m := range listening.FindAllStringSubmatch(s.log.String(), -1) {
		switch m[1] {
		case "admin":
			s.admin = m[2]
		case "http":
			s.http = m[2]
		}
	}
}

func (s *serving) ready(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		s.readAddrs()
		if s.admin != "" && s.http != "" {
			if resp, err := http.Get("http://" + s.admin + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return
				}
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("serve exited: %v\n%s", err, s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("serve not ready\n%s", s.log.String())
}

// call sends a request with the admin token (admin listener) or the
// application key and decodes the JSON answer.
func call(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s: %d %q is not a JSON object", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

func (s *serving) write(t *testing.T, tuple string) (int, map[string]any) {
	t.Helper()
	return call(t, "POST", "http://"+s.admin+"/v1/relationships", testAdminToken, `{"touches":["`+tuple+`"]}`)
}

func (s *serving) revision(t *testing.T) uint64 {
	t.Helper()
	status, out := call(t, "GET", "http://"+s.admin+"/v1/revision", testAdminToken, "")
	if status != 200 {
		t.Fatalf("GET /v1/revision: %d %v", status, out)
	}
	return uint64(out["revision"].(float64))
}

// evaluate asks AuthZEN whether user may read file:report.pdf, with a
// consistency token unless token is "".
func (s *serving) evaluate(t *testing.T, user, token string) (int, map[string]any) {
	t.Helper()
	ctx := ""
	if token != "" {
		ctx = `,"context":{"nexus_revision":"` + token + `"}`
	}
	return call(t, "POST", "http://"+s.http+"/access/v1/evaluation", testAppKey,
		`{"subject":{"type":"user","id":"`+user+`"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}`+ctx+`}`)
}

func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeCluster runs two replicas of `nexus serve --cluster` on an
// embedded NATS: the demo data arrives through the log, a write on one is
// seen on the other with its revision as a consistency token, a token
// ahead of the log fails closed, a policy load reaches both, and without
// NATS checks go on while writes are refused (503) until it returns.
func TestServeCluster(t *testing.T) {
	nats := natstest.Start(t, 1)
	url := strings.Join(nats.URLs(), ",")
	a := serve(t, t.TempDir(), "--cluster", url, "--cluster-name", "servetest", "--max-body-bytes", "8388608")
	a.ready(t)
	b := serve(t, t.TempDir(), "--cluster", url, "--cluster-name", "servetest")
	b.ready(t)

	// The demo data came through the log: both replicas hold it.
	eventually(t, 20*time.Second, "replicas converge", func() bool { return a.revision(t) > 0 && a.revision(t) == b.revision(t) })
	if status, out := b.evaluate(t, "bob", ""); status != 200 || out["decision"] != true {
		t.Fatalf("bob on B: %d %v, want the demo's allow", status, out)
	}

	status, out := a.write(t, "file:report.pdf#viewer@user:zed")
	if status != 200 {
		t.Fatalf("write on A: %d %v", status, out)
	}
	rev := uint64(out["revision"].(float64))
	if status, out := b.evaluate(t, "zed", strconv.FormatUint(rev, 10)); status != 200 || out["decision"] != true {
		t.Fatalf("zed on B with token %d: %d %v, want allowed", rev, status, out)
	}
	if got := b.revision(t); got < rev {
		t.Fatalf("B's revision %d after a check that waited for %d", got, rev)
	}
	// A token the log has not reached: bob, whom the data allows, is denied.
	ahead := strconv.FormatUint(rev+1000, 10)
	if status, out := b.evaluate(t, "bob", ahead); status != 503 || out["reason"] != pdp.CodeRevisionUnavailable {
		t.Fatalf("token %s ahead of the log: %d %v, want 503 %s", ahead, status, out, pdp.CodeRevisionUnavailable)
	}
	if status, out := b.evaluate(t, "bob", "not-a-revision"); status != 400 || out["reason"] != pdp.CodeBadRequest {
		t.Fatalf("malformed token: %d %v, want 400", status, out)
	}

	// A write the admin API takes but one log message cannot hold: 413,
	// and nothing written.
	var big strings.Builder
	big.WriteString(`{"touches":[`)
	for i := range 40_000 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `"file:big-%06d#viewer@user:someone-with-a-long-name"`, i)
	}
	big.WriteString(`]}`)
	revBefore := a.revision(t)
	if status, out := call(t, "POST", "http://"+a.admin+"/v1/relationships", testAdminToken, big.String()); status != 413 || out["reason"] != pdp.CodeTooLarge {
		t.Fatalf("a write larger than a log message: %d %v, want 413 %s", status, out, pdp.CodeTooLarge)
	}
	if got := a.revision(t); got != revBefore {
		t.Fatalf("a refused write moved the revision from %d to %d", revBefore, got)
	}

	// A schema write on A reaches B's policy: a new type becomes known.
	memo := func(s *serving) (int, map[string]any) {
		return call(t, "POST", "http://"+s.http+"/access/v1/evaluation", testAppKey,
			`{"subject":{"type":"user","id":"zed"},"action":{"name":"read"},"resource":{"type":"memo","id":"m1"}}`)
	}
	if status, out := memo(b); status != 400 || out["reason"] != pdp.CodeUnknownType {
		t.Fatalf("memo before the schema write: %d %v, want 400 %s", status, out, pdp.CodeUnknownType)
	}
	src := strings.Replace(string(drive.Schema), "types:\n", "types:\n  memo:\n    relations:\n      reader: [user]\n    permissions:\n      read: reader\n", 1)
	req0, _ := http.NewRequest("PUT", "http://"+a.admin+"/v1/schema", strings.NewReader(src))
	req0.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp0, err := http.DefaultClient.Do(req0)
	if err != nil {
		t.Fatal(err)
	}
	body0, _ := io.ReadAll(resp0.Body)
	resp0.Body.Close()
	if resp0.StatusCode != 200 || !strings.Contains(string(body0), `"revision"`) {
		t.Fatalf("PUT /v1/schema on A: %d %s", resp0.StatusCode, body0)
	}
	eventually(t, 10*time.Second, "B knows the new type", func() bool {
		status, _ := memo(b)
		return status == 200
	})

	// A policy load on A reaches B.
	pb := testPolicyBundle(t, "cluster-test-v2")
	req, _ := http.NewRequest("PUT", "http://"+a.admin+"/v1/policy", bytes.NewReader(pb))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"cluster_revision"`) {
		t.Fatalf("PUT /v1/policy on A: %d %s", resp.StatusCode, body)
	}
	for name, s := range map[string]*serving{"A": a, "B": b} {
		eventually(t, 10*time.Second, "policy on "+name, func() bool {
			_, out := call(t, "GET", "http://"+s.admin+"/v1/policy", testAdminToken, "")
			return out["revision"] == "cluster-test-v2"
		})
	}
	// A bundle without the configured entrypoints is refused before the log.
	req, _ = http.NewRequest("PUT", "http://"+a.admin+"/v1/policy", bytes.NewReader(testBundleWithout(t)))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Fatalf("a bundle without the entrypoints: %v %v, want 400", resp, err)
	}

	// The replica's metrics are on the server's registry.
	resp, err = http.Get("http://" + b.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"nexus_cluster_applied_revision", "nexus_cluster_degraded", "nexus_decisions_total"} {
		if !bytes.Contains(metrics, []byte(m)) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	// Without NATS: checks go on, writes are refused with 503, /healthz
	// says degraded, /readyz stays ready.
	nats.StopAll()
	eventually(t, 20*time.Second, "A degraded", func() bool {
		_, out := call(t, "GET", "http://"+a.admin+"/healthz", testAdminToken, "")
		return out["status"] == "degraded"
	})
	if status, out := a.write(t, "file:report.pdf#viewer@user:yan"); status != 503 || out["reason"] != pdp.CodeUnavailable {
		t.Fatalf("write without NATS: %d %v, want 503 %s", status, out, pdp.CodeUnavailable)
	}
	if status, out := a.evaluate(t, "zed", ""); status != 200 || out["decision"] != true {
		t.Fatalf("check without NATS: %d %v", status, out)
	}
	if status, out := call(t, "GET", "http://"+a.admin+"/readyz", "", ""); status != 200 || out["checks"] != "ready" || out["writes"] != "unavailable" || out["writes_reason"] == "" {
		t.Fatalf("/readyz without NATS: %d %v, want 200, checks ready, writes unavailable with a reason", status, out)
	}
	if status, out := a.write(t, "file:report.pdf#viewer@user:yan"); out["outcome"] != "not_written" || out["write_id"] == "" {
		t.Fatalf("write without NATS: %d %v, want outcome not_written with its write ID", status, out)
	}
	nats.RestartAll(t)
	var rev2 uint64
	eventually(t, 30*time.Second, "writes after NATS returned", func() bool {
		status, out := a.write(t, "file:report.pdf#viewer@user:yan")
		if status == 200 {
			rev2 = uint64(out["revision"].(float64))
		}
		return status == 200
	})
	if status, out := b.evaluate(t, "yan", strconv.FormatUint(rev2, 10)); status != 200 || out["decision"] != true {
		t.Fatalf("yan on B after recovery: %d %v", status, out)
	}
	_, out = call(t, "GET", "http://"+a.admin+"/healthz", testAdminToken, "")
	if out["status"] != "ok" {
		t.Fatalf("/healthz after recovery: %v", out)
	}
}

// TestServeClusterNoLogNotReady: a new replica (empty data directory)
// that cannot reach its log is not ready: it has nothing to answer from.
func TestServeClusterNoLogNotReady(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "nats://" + ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	dir := t.TempDir()
	cfg := filepath.Join(dir, "nexus.yaml")
	if err := os.WriteFile(cfg, []byte("cluster:\n  sync_timeout: 500ms\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serve(t, filepath.Join(dir, "data"), "--config", cfg, "--cluster", dead, "--cluster-name", "nolog")
	eventually(t, 60*time.Second, "admin listener", func() bool { s.readAddrs(); return s.admin != "" })
	time.Sleep(2 * time.Second) // well past the sync timeout
	status, out := call(t, "GET", "http://"+s.admin+"/readyz", "", "")
	if status != 503 || !strings.Contains(fmt.Sprint(out["reason"]), "not read the cluster log") || out["writes"] != "unavailable" {
		t.Fatalf("/readyz of an empty replica without its log: %d %v, want 503", status, out)
	}
}

// TestServeClusterRefusesSingleNodeData: a data directory written in
// single-node mode cannot join a cluster, and the error says why.
func TestServeClusterRefusesSingleNodeData(t *testing.T) {
	nats := natstest.Start(t, 1)
	dir := t.TempDir()
	ctx := context.Background()
	store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(dir, relDataFile)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.Load(ctx, store); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	s := serve(t, dir, "--cluster", strings.Join(nats.URLs(), ","))
	select {
	case err := <-s.done:
		if err == nil || !strings.Contains(err.Error(), "single-node mode cannot join a cluster") {
			t.Fatalf("err = %v, want the single-node refusal", err)
		}
		s.stopped.Do(func() {})
	case <-time.After(60 * time.Second):
		t.Fatal("serve --cluster on a single-node data directory did not fail")
	}
}

// TestServeClusterConfig: the YAML section and the flags.
func TestServeClusterConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "nexus.yaml")
	yaml := "cluster:\n  nats_urls: [nats://n1:4222, nats://n2:4222]\n  name: prod\n  stream_replicas: 3\n  credentials: /etc/nats/nexus.creds\n  tls:\n    ca_file: /etc/nats/ca.pem\n    cert_file: /etc/nats/nexus.pem\n    key_file: /etc/nats/nexus-key.pem\n    server_name: nats.internal\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := readServeConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := newServeCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	var c serveConfig
	mergeFlags(cmd, &c, file)
	if strings.Join(c.Cluster.NATSURLs, ",") != "nats://n1:4222,nats://n2:4222" || c.Cluster.Name != "prod" || c.Cluster.StreamReplicas != 3 ||
		c.Cluster.Credentials != "/etc/nats/nexus.creds" || c.Cluster.TLS != (clusterTLS{CAFile: "/etc/nats/ca.pem", CertFile: "/etc/nats/nexus.pem", KeyFile: "/etc/nats/nexus-key.pem", ServerName: "nats.internal"}) {
		t.Fatalf("cluster section not applied: %+v", c.Cluster)
	}
	cmd = newServeCmd()
	if err := cmd.ParseFlags([]string{"--cluster", "nats://a:4222,nats://b:4222", "--cluster-name", "flag"}); err != nil {
		t.Fatal(err)
	}
	c = serveConfig{}
	c.Cluster.NATSURLs, _ = cmd.Flags().GetStringSlice("cluster")
	c.Cluster.Name, _ = cmd.Flags().GetString("cluster-name")
	mergeFlags(cmd, &c, file)
	if strings.Join(c.Cluster.NATSURLs, ",") != "nats://a:4222,nats://b:4222" || c.Cluster.Name != "flag" {
		t.Fatalf("flags must override the file: %+v", c.Cluster)
	}
	if err := os.WriteFile(path, []byte("cluster:\n  nats_url: nats://n1:4222\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readServeConfig(path); err == nil || !strings.Contains(err.Error(), "nats_url") {
		t.Fatalf("a misspelt cluster key: err = %v", err)
	}
}

// testPolicyBundle is the default policy as a bundle of revision rev.
func testPolicyBundle(t *testing.T, rev string) []byte {
	t.Helper()
	b, err := loadPolicy(context.Background(), serveConfig{Core: pdp.Config{EnvoyEntrypoint: pdp.DefaultEnvoyEntrypoint, AuthzEntrypoint: pdp.DefaultAuthzEntrypoint}})
	if err != nil {
		t.Fatal(err)
	}
	b.Manifest.Revision = rev
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testBundleWithout is the default policy compiled without the authz
// entrypoint.
func testBundleWithout(t *testing.T) []byte {
	t.Helper()
	b, err := loadPolicy(context.Background(), serveConfig{Entrypoints: []string{pdp.DefaultEnvoyEntrypoint}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := b.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRelImportThroughCluster: rel import --admin-url writes through a
// replica's admin API (so through the log), validates the whole input
// first, and a direct import into a replica's data directory is refused.
func TestRelImportThroughCluster(t *testing.T) {
	nats := natstest.Start(t, 1)
	dir := t.TempDir()
	a := serve(t, dir, "--cluster", strings.Join(nats.URLs(), ","), "--cluster-name", "importtest")
	a.ready(t)
	in := filepath.Join(t.TempDir(), "tuples.txt")
	var lines []string
	for i := range 12 {
		lines = append(lines, "file:imp-"+strconv.Itoa(i)+"#viewer@user:imp")
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := newRelCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		cmd.SilenceUsage = true
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	before := a.revision(t)
	out, err := run("import", "--admin-url", "http://"+a.admin, "--admin-token", testAdminToken, in)
	if err != nil || !strings.Contains(out, "imported 12 tuples") {
		t.Fatalf("remote import: %v\n%s", err, out)
	}
	if a.revision(t) <= before {
		t.Fatal("the import did not move the replica's revision")
	}
	status, got := call(t, "GET", "http://"+a.admin+"/v1/relationships?subject_type=user&subject_id=imp", testAdminToken, "")
	if status != 200 || len(got["tuples"].([]any)) != 12 {
		t.Fatalf("imported tuples on the replica: %d %v", status, got)
	}
	// An invalid line stops the import before anything is written.
	bad := filepath.Join(t.TempDir(), "bad.txt")
	if err := os.WriteFile(bad, []byte("file:ok-1#viewer@user:x\nfile:ok-2#nosuch@user:x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rev := a.revision(t)
	if out, err := run("import", "--admin-url", "http://"+a.admin, "--admin-token", testAdminToken, bad); err == nil || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("invalid input: %v\n%s", err, out)
	}
	if a.revision(t) != rev {
		t.Fatal("a refused import wrote")
	}
	if _, err := run("import", "--admin-url", "http://"+a.admin, "--admin-token", "wrong", in); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
	// Directly into the replica's data directory: every command that
	// writes is refused, and nothing is written.
	a.stop(t)
	schema := filepath.Join(t.TempDir(), "schema.zed")
	if err := os.WriteFile(schema, []byte("definition user {}\ndefinition file {\n  relation viewer: user\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"import", "--data-dir", dir, in},
		{"import", "--from", "spicedb", "--data-dir", dir, in},
		{"write", "--data-dir", dir, "file:direct#viewer@user:x"},
		{"delete", "--data-dir", dir, "file:imp-1#viewer@user:imp"},
		{"schema", "write", "--data-dir", dir, "--force", schema},
	} {
		if out, err := run(args...); err == nil || !strings.Contains(err.Error(), "cluster replica's data directory") {
			t.Errorf("rel %v into a replica's store: %v\n%s", args, err, out)
		}
	}
	out, err = run("export", "--data-dir", dir, "--format", "text")
	if err != nil || strings.Contains(out, "direct") || !strings.Contains(out, "imp-1") {
		t.Fatalf("after the refused writes, the replica's store reads %q, %v", out, err)
	}
}

// TestClusterErrors: the cluster's write errors reach clients as the
// server's codes: 413 for a write too large for the log, 503 for a write
// that was not written, 504 for one whose outcome is unknown (never 503,
// which says not written); anything else unchanged.
func TestClusterErrors(t *testing.T) {
	tests := []struct {
		err  error
		code string
	}{
		{fmt.Errorf("x: %w", cluster.ErrTooLarge), pdp.CodeTooLarge},
		{fmt.Errorf("x: %w", cluster.ErrUnavailable), pdp.CodeUnavailable},
		{fmt.Errorf("x: %w", cluster.ErrContention), pdp.CodeUnavailable},
		{fmt.Errorf("x: %w: %w", cluster.ErrOutcomeUnknown, cluster.ErrNotApplied), pdp.CodeOutcomeUnknown},
		{fmt.Errorf("x: %w: (%w)", cluster.ErrOutcomeUnknown, cluster.ErrUnavailable), pdp.CodeOutcomeUnknown},
		{cluster.ErrClosed, pdp.CodeUnavailable},
		{fmt.Errorf("x: %w", datastore.ErrPreconditionFailed), pdp.CodePreconditionFailed},
		{fmt.Errorf("x: %w", datastore.ErrInvalidTuple), pdp.CodeBadRequest},
	}
	for _, tt := range tests {
		got := clusterError(7, tt.err)
		if code := pdp.Code(got); code != tt.code {
			t.Errorf("%v: code %q, want %q", tt.err, code, tt.code)
		}
		if !errors.Is(got, tt.err) {
			t.Errorf("%v: the cause is lost: %v", tt.err, got)
		}
	}
	if err := clusterError(7, fmt.Errorf("x: %w: %w", cluster.ErrOutcomeUnknown, cluster.ErrNotApplied)); !strings.Contains(err.Error(), "revision 7") {
		t.Errorf("a write in the log but not applied here names no revision: %v", err)
	}
	if clusterError(7, nil) != nil {
		t.Error("no error became one")
	}
}
