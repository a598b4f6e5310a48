package nexusproc

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Replica is one `nexus serve --cluster` process that a test may kill,
// stop, continue and start again on the same data directory and ports,
// from any goroutine.
type Replica struct {
	Name  string
	Dir   string
	Admin string // admin listener (relationships, revision, readyz)
	HTTP  string // application listener (AuthZEN)
	Args  []string

	bin    string
	mu     sync.Mutex
	proc   *Proc
	paused bool
	old    []string // output of earlier processes
}

// ReplicaConfig says how to run a replica.
type ReplicaConfig struct {
	Name       string
	ConfigFile string   // --config
	NATS       []string // --cluster URLs
	Cluster    string   // --cluster-name
	AdminToken string
	AppKey     string
	Extra      []string // more flags
}

// HasFlag reports whether `nexus serve --help` lists flag (such as
// "--write-timeout"): tests use newer flags only on a binary that has
// them.
func HasFlag(t testing.TB, flag string) bool {
	t.Helper()
	out, _ := exec.Command(Binary(t), "serve", "--help").CombinedOutput()
	return strings.Contains(string(out), flag+" ")
}

// StartReplica starts a replica and waits until it is ready; it is killed
// when the test ends.
func StartReplica(t testing.TB, c ReplicaConfig) *Replica {
	t.Helper()
	r := &Replica{Name: c.Name, Dir: t.TempDir(), Admin: FreeAddr(t), HTTP: FreeAddr(t), bin: Binary(t)}
	r.Args = append([]string{"serve", "--config", c.ConfigFile, "--cluster", strings.Join(c.NATS, ","), "--cluster-name", c.Cluster,
		"--data-dir", filepath.Join(r.Dir, "data"), "--grpc-addr", "-", "--http-addr", r.HTTP, "--admin-addr", r.Admin,
		"--admin-token", c.AdminToken, "--app-api-key", c.AppKey}, c.Extra...)
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.proc != nil {
			r.proc.Kill()
		}
		if t.Failed() {
			t.Logf("nexus %s output (tail):\n%s", r.Name, tailString(r.output(), 4000))
		}
	})
	if err := r.Start(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	return r
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// output is every process' output so far; r.mu is held.
func (r *Replica) output() string {
	s := strings.Join(r.old, "")
	if r.proc != nil {
		s += r.proc.Out()
	}
	return s
}

// Start starts the replica (nothing if it runs) and waits up to d until
// it is ready.
func (r *Replica) Start(d time.Duration) error {
	r.mu.Lock()
	p := r.proc
	if p == nil {
		var err error
		p, err = Launch(r.bin, r.Dir, r.Admin, r.Args...)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		r.proc, r.paused = p, false
	}
	r.mu.Unlock()
	if err := p.WaitReady(d); err != nil {
		return fmt.Errorf("replica %s: %w", r.Name, err)
	}
	return nil
}

// Kill kills the replica with SIGKILL.
func (r *Replica) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return
	}
	r.proc.Kill()
	r.old = append(r.old, r.proc.Out())
	r.proc, r.paused = nil, false
}

// Stop stops the replica gracefully (SIGTERM, SIGKILL after d).
func (r *Replica) Stop(d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return nil
	}
	if r.paused {
		_ = r.proc.Signal(syscall.SIGCONT)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := r.proc.Stop(ctx)
	r.old = append(r.old, r.proc.Out())
	r.proc, r.paused = nil, false
	if err != nil && !strings.Contains(err.Error(), "exit status") {
		return fmt.Errorf("replica %s: %w", r.Name, err)
	}
	return nil
}

// Pause stops the replica with SIGSTOP.
func (r *Replica) Pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		_ = r.proc.Signal(syscall.SIGSTOP)
		r.paused = true
	}
}

// Cont continues the replica after Pause.
func (r *Replica) Cont() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		_ = r.proc.Signal(syscall.SIGCONT)
		r.paused = false
	}
}

// Running reports whether the replica has a process (paused or not).
func (r *Replica) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc != nil
}
