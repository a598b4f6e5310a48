package datastore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/datastore"
)

// TestLockHolderChild holds a data file open for TestOpenLocked until its
// stdin closes; it does nothing unless NEXUS_LOCK_CHILD names the file.
func TestLockHolderChild(t *testing.T) {
	path := os.Getenv("NEXUS_LOCK_CHILD")
	if path == "" {
		t.Skip("child process of TestOpenLocked")
	}
	s, err := datastore.Open(context.Background(), datastore.Config{Path: path, ReadOnly: os.Getenv("NEXUS_LOCK_READONLY") != ""})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("open")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	_ = s.Close()
}

// holdLock opens path in another process and returns its pid; the
// process closes the file when the test ends.
func holdLock(t *testing.T, path string, readOnly bool) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHolderChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NEXUS_LOCK_CHILD="+path)
	if readOnly {
		cmd.Env = append(cmd.Env, "NEXUS_LOCK_READONLY=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "open" {
		t.Fatalf("child: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// TestOpenLocked opens a data file that another process has open: the
// second Open fails after Config.OpenTimeout with a *LockedError that
// names the file and, on Linux, the process holding it.
func TestOpenLocked(t *testing.T) {
	tests := []struct {
		name               string
		holderRO, secondRO bool
		wantLockKind       string
	}{
		{"server running, second server", false, false, "exclusive"},
		{"server running, read-only command", false, true, "shared"},
		{"read-only command running, server", true, false, "exclusive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relations.db")
			s, err := datastore.Open(context.Background(), datastore.Config{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			pid := holdLock(t, path, tc.holderRO)
			start := time.Now()
			_, err = datastore.Open(context.Background(), datastore.Config{Path: path, ReadOnly: tc.secondRO, OpenTimeout: 300 * time.Millisecond})
			took := time.Since(start)
			var le *datastore.LockedError
			if !errors.As(err, &le) || !errors.Is(err, datastore.ErrLocked) {
				t.Fatalf("Open = %v, want a *LockedError", err)
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{path, "is locked by another process", "a nexus server or another nexus command has it open", tc.wantLockKind + " lock"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error lacks %q: %s", want, msg)
				}
			}
			if runtime.GOOS == "linux" && (le.PID != pid || !strings.Contains(msg, fmt.Sprintf("pid %d", pid))) {
				t.Errorf("error names pid %d, want %d: %s", le.PID, pid, msg)
			}
			if took < 250*time.Millisecond || took > 5*time.Second {
				t.Errorf("Open gave up after %v, want about the 300ms OpenTimeout", took)
			}
		})
	}
}

// TestOpenLockedInProcess: a second Open of a file this process holds
// fails the same way, and the file opens once the first store is closed.
func TestOpenLockedInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relations.db")
	s := openTemp(t, datastore.Config{Path: path})
	_, err := datastore.Open(context.Background(), datastore.Config{Path: path, OpenTimeout: 100 * time.Millisecond})
	if !errors.Is(err, datastore.ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Open = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := datastore.Open(context.Background(), datastore.Config{Path: path, OpenTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open after Close = %v", err)
	}
	_ = s2.Close()
}
