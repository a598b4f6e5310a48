package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

// TestReplicaProcess is not a test: it is the replica process that
// TestKillReplicaProcess starts (this test binary again) and kills. It
// writes tuples one after another and prints "ack <revision> <tuple>"
// for each write acknowledged to it.
func TestReplicaProcess(t *testing.T) {
	url, path := os.Getenv("NEXUS_CLUSTER_CHILD_URL"), os.Getenv("NEXUS_CLUSTER_CHILD_PATH")
	if url == "" {
		t.Skip("the replica process of TestKillReplicaProcess")
	}
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cluster.New(ctx, cluster.Config{URLs: []string{url}, Name: "test", Store: s, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		tu := fmt.Sprintf("doc:child-%d#viewer@user:u%d", i, i)
		rev, err := r.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, tu)})
		if err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			continue
		}
		fmt.Printf("ack %d %s\n", rev, tu)
	}
}

// TestKillReplicaProcess kills a replica process with SIGKILL while it and
// another replica write, then starts a replica on the killed one's data
// directory: its store opens, it catches up, and every write acknowledged
// to either replica is there, on both, byte for byte.
func TestKillReplicaProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	ns := natstest.Start(t, 1)
	cfg := cluster.Config{URLs: ns.URLs(), SnapshotInterval: -1}
	a := newReplica(t, cfg, "")
	waitFollowing(t, a)
	mustSchema(t, a, testSchema)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "child.db")
	cmd := exec.Command(exe, "-test.run=^TestReplicaProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NEXUS_CLUSTER_CHILD_URL="+ns.URLs()[0], "NEXUS_CLUSTER_CHILD_PATH="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// a writes meanwhile.
	stop := make(chan struct{})
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		acked  []string
		maxRev datastore.Revision
	)
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tu := fmt.Sprintf("doc:parent-%d#viewer@user:u%d", i, i)
			rev, err := a.Write(context.Background(), datastore.WriteRequest{Touches: fixture.Tuples(t, tu)})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			acked, maxRev = append(acked, tu), max(maxRev, rev)
			mu.Unlock()
		}
	})

	sc := bufio.NewScanner(out)
	childAcks := 0
	deadline := time.Now().Add(60 * time.Second)
	for childAcks < 60 && sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ack" {
			continue
		}
		rev, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		mu.Lock()
		acked, maxRev = append(acked, f[2]), max(maxRev, datastore.Revision(rev))
		mu.Unlock()
		childAcks++
		if time.Now().After(deadline) {
			t.Fatalf("the child acknowledged only %d writes in 60s", childAcks)
		}
	}
	if childAcks < 60 {
		t.Fatalf("the child stopped after %d acknowledged writes: %v", childAcks, sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL, mid-storm
		t.Fatal(err)
	}
	_ = cmd.Wait()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()

	// The killed process committed without fsync: its record says so, and
	// names this boot, so the file is trusted (not moved aside).
	if _, err := os.Stat(path + ".unsynced"); runtime.GOOS == "linux" && err != nil {
		t.Fatalf("the killed replica left no record of unsynced commits: %v", err)
	}
	// The killed replica's data directory, on a new replica.
	b := newReplica(t, cfg, path)
	if torn, _ := filepath.Glob(path + ".torn-*"); len(torn) > 0 {
		t.Fatalf("the killed replica's store was moved aside: %v", torn)
	}
	waitFollowing(t, b)
	if err := b.Sync(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	converge(t, max(maxRev, a.Revision()), a, b)
	for _, tu := range acked {
		parsed := fixture.Tuples(t, tu)[0]
		for name, r := range map[string]*replica{"a": a, "b": b} {
			ok, err := fixture.CheckText(context.Background(), r.store, parsed.Object.String(), parsed.Relation, parsed.Subject.String())
			if err != nil || !ok {
				t.Fatalf("acknowledged %s missing on %s: %v, %v", tu, name, ok, err)
			}
		}
	}
	t.Logf("%d writes acknowledged (%d by the killed process), all on both replicas at revision %d", len(acked), childAcks, b.Revision())
}
