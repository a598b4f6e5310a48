package datastore_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
)

// TestCrashChild is the writing child of TestCrashSafety; it does nothing
// unless NEXUS_CRASH_CHILD names a data file.
func TestCrashChild(t *testing.T) {
	path := os.Getenv("NEXUS_CRASH_CHILD")
	if path == "" {
		t.Skip("child process of TestCrashSafety")
	}
	base, _ := strconv.Atoi(os.Getenv("NEXUS_CRASH_BASE"))
	ctx := context.Background()
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if _, err := s.Schema(ctx); err != nil {
		sc, _ := datastore.ParseSchema(drive.Schema)
		if _, err := s.WriteSchema(ctx, sc, false); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("c%d_%d_%d", base, g, i)
				tu := api.Tuple{Object: api.Object{Type: "folder", ID: id}, Relation: "viewer", Subject: api.Subject{Type: "user", ID: "u" + id}}
				var err error
				if i%50 == 49 {
					// Now and then a small import, acknowledged when it returns.
					_, err = s.Import(ctx, strings.NewReader(tu.String()+"\n"), datastore.ImportOptions{Format: datastore.FormatText})
				} else {
					_, err = s.Write(ctx, datastore.WriteRequest{Touches: []api.Tuple{tu}})
				}
				if err != nil {
					fmt.Println("error", err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s\n", id)
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func TestCrashSafety(t *testing.T) {
	if os.Getenv("NEXUS_CRASH_CHILD") != "" {
		t.Skip("in the child")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	r := rand.New(rand.NewPCG(7, 7))
	var acked []string
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "NEXUS_CRASH_CHILD="+path, "NEXUS_CRASH_BASE="+strconv.Itoa(round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Wait for the first acknowledgement, then kill at a random point.
		first := <-lines
		if !strings.HasPrefix(first, "ack ") {
			t.Fatalf("child said %q", first)
		}
		acked = append(acked, strings.TrimPrefix(first, "ack "))
		time.Sleep(time.Duration(20+r.IntN(300)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for l := range lines {
			if id, ok := strings.CutPrefix(l, "ack "); ok {
				acked = append(acked, id)
			} else if strings.HasPrefix(l, "error") {
				t.Fatalf("child: %s", l)
			}
		}
		_ = cmd.Wait()

		s, err := datastore.Open(context.Background(), datastore.Config{Path: path})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		got, err := s.Read(context.Background(), datastore.Filter{ObjectType: "folder", Relation: "viewer"})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, tu := range got {
			have[tu.Object.ID] = true
		}
		for _, id := range acked {
			if !have[id] {
				t.Fatalf("round %d: acknowledged write %s lost after SIGKILL", round, id)
			}
		}
		rev, _ := s.Revision(context.Background())
		if int(rev) < len(acked) {
			t.Fatalf("round %d: revision %d < %d acknowledged writes", round, rev, len(acked))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d acknowledged writes present, revision %d", round, len(acked), rev)
	}
}
