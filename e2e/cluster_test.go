package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/e2e/internal/natsproc"
	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

const (
	clusterAdminToken = "e2e-cluster-admin-token"
	clusterAppKey     = "e2e-cluster-app-key"
)

// replicaProc is one `nexus serve --cluster` process.
type replicaProc struct {
	name, dir, admin, http string
	args                   []string
	proc                   *nexusproc.Proc
}

func startReplica(t *testing.T, name, configFile, urls string) *replicaProc {
	t.Helper()
	r := &replicaProc{name: name, dir: t.TempDir(), admin: nexusproc.FreeAddr(t), http: nexusproc.FreeAddr(t)}
	r.args = []string{"serve", "--config", configFile, "--cluster", urls, "--cluster-name", "e2e",
		"--data-dir", filepath.Join(r.dir, "data"), "--grpc-addr", "-", "--http-addr", r.http, "--admin-addr", r.admin,
		"--admin-token", clusterAdminToken, "--app-api-key", clusterAppKey}
	r.proc = nexusproc.Start(t, r.dir, r.admin, r.args...)
	return r
}

// restart starts the replica again on its data directory and addresses.
func (r *replicaProc) restart(t *testing.T) {
	t.Helper()
	r.proc = nexusproc.Start(t, r.dir, r.admin, r.args...)
}

func (r *replicaProc) do(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, map[string]any{"transport_error": err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s %s on %s: %d %q is not JSON", method, url, r.name, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// write touches tuples through the admin API; it returns the status and
// the revision of an acknowledged write.
func (r *replicaProc) write(t *testing.T, tuples ...string) (int, uint64, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string][]string{"touches": tuples})
	status, out := r.do(t, "POST", "http://"+r.admin+"/v1/relationships", clusterAdminToken, string(body))
	if status != 200 {
		return status, 0, out
	}
	return status, uint64(out["revision"].(float64)), out
}

func (r *replicaProc) revision(t *testing.T) uint64 {
	t.Helper()
	status, out := r.do(t, "GET", "http://"+r.admin+"/v1/revision", clusterAdminToken, "")
	if status != 200 {
		return 0
	}
	return uint64(out["revision"].(float64))
}

// export is every tuple the replica holds, sorted.
func (r *replicaProc) export(t *testing.T) []string {
	t.Helper()
	status, out := r.do(t, "GET", "http://"+r.admin+"/v1/relationships?limit=100000", clusterAdminToken, "")
	if status != 200 {
		t.Fatalf("export on %s: %d %v", r.name, status, out)
	}
	var ts []string
	for _, v := range out["tuples"].([]any) {
		ts = append(ts, v.(string))
	}
	slices.Sort(ts)
	return ts
}

// readAllowed asks AuthZEN whether user may read file:id, with a
// consistency token unless token is 0.
func (r *replicaProc) readAllowed(t *testing.T, user, id string, token uint64) (int, map[string]any) {
	t.Helper()
	ctx := ""
	if token != 0 {
		ctx = `,"context":{"nexus_revision":"` + strconv.FormatUint(token, 10) + `"}`
	}
	return r.do(t, "POST", "http://"+r.http+"/access/v1/evaluation", clusterAppKey,
		`{"subject":{"type":"user","id":"`+user+`"},"action":{"name":"read"},"resource":{"type":"file","id":"`+id+`"}`+ctx+`}`)
}

func (r *replicaProc) health(t *testing.T) map[string]any {
	t.Helper()
	_, out := r.do(t, "GET", "http://"+r.admin+"/healthz", "", "")
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// converged waits until every replica reached rev, then requires their
// exports to be identical; it returns the export.
func converged(t *testing.T, rev uint64, rs ...*replicaProc) []string {
	t.Helper()
	for _, r := range rs {
		waitFor(t, 60*time.Second, r.name+" reaches revision "+strconv.FormatUint(rev, 10), func() bool { return r.revision(t) >= rev })
	}
	// Writes may still arrive elsewhere: compare at one revision.
	want := rs[0].export(t)
	for _, r := range rs[1:] {
		if got := r.export(t); !slices.Equal(got, want) {
			t.Fatalf("%s's export (%d tuples) differs from %s's (%d tuples)", r.name, len(got), rs[0].name, len(want))
		}
	}
	return want
}

// TestCluster runs three nexus replicas of one cluster on a three-node
// NATS JetStream cluster (stream R3), every process a real binary.
func TestCluster(t *testing.T) {
	nats := natsproc.Start(t, 3)
	conf := filepath.Join(t.TempDir(), "nexus.yaml")
	if err := os.WriteFile(conf, []byte("cluster:\n  stream_replicas: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startReplica(t, "A", conf, nats.URLs())
	b := startReplica(t, "B", conf, nats.URLs())
	c := startReplica(t, "C", conf, nats.URLs())
	all := []*replicaProc{a, b, c}
	top := t // processes started in a subtest live until the whole test ends

	// The first replica wrote the demo through the log; all hold it.
	waitFor(t, 60*time.Second, "demo data on every replica", func() bool {
		rev := a.revision(t)
		return rev > 0 && b.revision(t) == rev && c.revision(t) == rev
	})

	t.Run("writes-on-every-replica-converge", func(t *testing.T) {
		var last uint64
		for i := range 30 {
			r := all[i%3]
			status, rev, out := r.write(t, fmt.Sprintf("file:conv-%d#viewer@user:u%d", i, i))
			if status != 200 {
				t.Fatalf("write %d on %s: %d %v", i, r.name, status, out)
			}
			last = max(last, rev)
		}
		ts := converged(t, last, all...)
		for i := range 30 {
			if !slices.Contains(ts, fmt.Sprintf("file:conv-%d#viewer@user:u%d", i, i)) {
				t.Fatalf("write %d missing from the converged export", i)
			}
		}
	})

	t.Run("consistency-token-on-another-replica", func(t *testing.T) {
		for i := range 10 {
			user := fmt.Sprintf("tok%d", i)
			status, rev, out := a.write(t, "file:report.pdf#viewer@user:"+user)
			if status != 200 {
				t.Fatalf("write on A: %d %v", status, out)
			}
			// Right after the write, on B, with the write's revision.
			if status, out := b.readAllowed(t, user, "report.pdf", rev); status != 200 || out["decision"] != true {
				t.Fatalf("%s on B with token %d: %d %v, want allowed", user, rev, status, out)
			}
		}
		// A token the log has not reached fails closed on a user the
		// data allows.
		ahead := a.revision(t) + 1_000_000
		if status, out := c.readAllowed(t, "bob", "report.pdf", ahead); status != 503 || out["reason"] != "revision_unavailable" {
			t.Fatalf("token ahead of the log: %d %v, want 503 revision_unavailable", status, out)
		}
	})

	t.Run("sigkill-a-replica-during-writes", func(t *testing.T) {
		var (
			mu    sync.Mutex
			acked []string
			last  uint64
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w, r := range []*replicaProc{a, b} {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					tu := fmt.Sprintf("file:kill-%d-%d#viewer@user:k%d", w, i, i)
					status, rev, _ := r.write(t, tu)
					if status == 200 {
						mu.Lock()
						acked = append(acked, tu)
						last = max(last, rev)
						mu.Unlock()
					}
				}
			})
		}
		time.Sleep(500 * time.Millisecond)
		if err := c.proc.Cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "C gone after SIGKILL", func() bool {
			_, err := http.Get("http://" + c.admin + "/readyz")
			return err != nil
		})
		c.restart(top)
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		if len(acked) < 10 {
			t.Fatalf("only %d writes acknowledged during the test", len(acked))
		}
		ts := converged(t, last, all...)
		for _, tu := range acked {
			if _, ok := slices.BinarySearch(ts, tu); !ok {
				t.Fatalf("acknowledged write %s lost", tu)
			}
		}
		t.Logf("%d writes acknowledged while C was killed and restarted; C caught up to %d", len(acked), c.revision(t))
	})

	t.Run("one-nats-node-down", func(t *testing.T) {
		nats.Stop(1)
		defer func() {
			nats.Restart(1)
			nats.WaitHealthy(60 * time.Second)
		}()
		var last uint64
		for i, r := range all {
			tu := fmt.Sprintf("file:one-down-%d#viewer@user:o%d", i, i)
			// A file needs a tenant: this one inherits its folder's.
			in := fmt.Sprintf("file:one-down-%d#parent@folder:root", i)
			// The stream may elect a new leader first.
			waitFor(t, 30*time.Second, "a write on "+r.name+" with one NATS node down", func() bool {
				status, rev, _ := r.write(t, tu, in)
				last = max(last, rev)
				return status == 200
			})
			// A replica whose log consumer was on the stopped node needs a
			// few seconds to follow from another: until then a check with
			// the token fails closed (503 revision_unavailable), never
			// answers from older data.
			var status int
			var out map[string]any
			waitFor(t, 30*time.Second, "a check with the token on the next replica", func() bool {
				status, out = all[(i+1)%3].readAllowed(t, fmt.Sprintf("o%d", i), fmt.Sprintf("one-down-%d", i), last)
				return !(status == 503 && out["reason"] == "revision_unavailable")
			})
			if status != 200 || out["decision"] != true {
				t.Fatalf("check with one NATS node down: %d %v", status, out)
			}
		}
		converged(t, last, all...)
	})

	t.Run("all-nats-down-then-back", func(t *testing.T) {
		for i := range 3 {
			nats.Stop(i)
		}
		for _, r := range all {
			waitFor(t, 30*time.Second, r.name+" reports degraded", func() bool { return r.health(t)["status"] == "degraded" })
			if status, out := r.readAllowed(t, "bob", "report.pdf", 0); status != 200 || out["decision"] != true {
				t.Fatalf("check on %s without NATS: %d %v", r.name, status, out)
			}
			if status, _, out := r.write(t, "file:report.pdf#viewer@user:nobody"); status != 503 || out["reason"] != "unavailable" {
				t.Fatalf("write on %s without NATS: %d %v, want 503 unavailable", r.name, status, out)
			}
		}
		for i := range 3 {
			nats.Restart(i)
		}
		nats.WaitHealthy(60 * time.Second)
		var last uint64
		for i, r := range all {
			tu := fmt.Sprintf("file:back-%d#viewer@user:b%d", i, i)
			waitFor(t, 60*time.Second, "a write on "+r.name+" after NATS returned", func() bool {
				status, rev, _ := r.write(t, tu)
				last = max(last, rev)
				return status == 200
			})
		}
		ts := converged(t, last, all...)
		if slices.Contains(ts, "file:report.pdf#viewer@user:nobody") {
			t.Fatal("a write refused with 503 was applied")
		}
		for _, r := range all {
			waitFor(t, 30*time.Second, r.name+" healthy again", func() bool { return r.health(t)["status"] == "ok" })
		}
	})
}
