// Package nexusproc builds the real nexus binary once per test binary and
// runs it as a child process, the way users and proxies meet it.
package nexusproc

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RepoRoot is the repository root (the parent of e2e/).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var build = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("NEXUS_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "nexus-e2e-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nexus")
	// The tags `make build` uses: the binary the e2e tests drive is the
	// one shipped (vtprotobuf: go-control-plane's generated encoder).
	cmd := exec.Command("go", "build", "-tags", "vtprotobuf", "-o", bin, "./cmd/nexus")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -tags vtprotobuf ./cmd/nexus: %v\n%s", err, out)
	}
	return bin, nil
})

// Binary returns the path of the built nexus binary ($NEXUS_BIN if set).
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// FreeAddr returns a loopback address with a port free right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePorts(t, 1)[0])
}

// FreePorts returns n distinct loopback ports free right now. They are
// chosen at random below the kernel's ephemeral range: a port from that
// range (what 127.0.0.1:0 gives) may be taken as the source port of any
// outgoing connection before the process meant to listen on it binds it,
// or while a replica is restarted on it.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	top := 0 // the ephemeral range's first port; 0 lets the kernel choose
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			top, _ = strconv.Atoi(f[0])
		}
	}
	const floor = 10000
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if top > floor+n && tries < 100*n {
			addr = "127.0.0.1:" + strconv.Itoa(floor+rand.IntN(top-floor))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				t.Fatal(err)
			}
			continue // taken: try another
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Proc is a running nexus.
type Proc struct {
	Cmd       *exec.Cmd
	Dir       string
	AdminAddr string
	Output    *bytes.Buffer
	done      chan error
}

// Start runs `nexus args...` in dir (a new temporary directory if empty)
// and waits until its admin /readyz answers 200. adminAddr is where to
// poll; it must match the args (or the default 127.0.0.1:8282).
func Start(t testing.TB, dir, adminAddr string, args ...string) *Proc {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	p, err := Launch(Binary(t), dir, adminAddr, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	if err := p.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// Launch starts `bin args...` in dir and returns at once; WaitReady
// waits for it. Unlike Start it never ends the test, so a goroutine other
// than the test's may call it; the caller kills the process when done.
func Launch(bin, dir, adminAddr string, args ...string) (*Proc, error) {
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = &lockedWriter{w: &out}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nexus: %w", err)
	}
	p := &Proc{Cmd: cmd, Dir: dir, AdminAddr: adminAddr, Output: &out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// WaitReady waits until the admin /readyz answers 200, the process exits,
// or d passes.
func (p *Proc) WaitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	c := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Get("http://" + p.AdminAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("nexus exited before it was ready: %v\n%s", err, p.Out())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nexus not ready after %v\n%s", d, p.Out())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Out is what the process wrote so far.
func (p *Proc) Out() string {
	w := p.Cmd.Stdout.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

// Kill kills the process with SIGKILL (continuing it first if it was
// stopped) and waits for it to exit.
func (p *Proc) Kill() {
	p.kill()
}

func (p *Proc) kill() {
	select {
	case err := <-p.done:
		p.done <- err
		return
	default:
	}
	_ = p.Cmd.Process.Kill()
	err := <-p.done
	p.done <- err
}

// Signal sends sig to the process (SIGSTOP, SIGCONT).
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits for the exit status.
func (p *Proc) Stop(ctx context.Context) error {
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("nexus did not exit after SIGTERM: %w", ctx.Err())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
