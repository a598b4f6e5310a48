// Package natsproc runs the real nats-server binary as a JetStream cluster
// of several nodes on loopback ports, for end-to-end tests. Nodes can be
// stopped and started again on the same ports and storage.
package natsproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// Find returns the path of nats-server (on PATH or in $(go env
// GOPATH)/bin), or an error whose text is a one-line reason to skip.
func Find() (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "nats-server")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("nats-server is not installed (make deps installs it with go install github.com/nats-io/nats-server/v2@v2.15.2)")
}

// Options change how Start configures the nodes.
type Options struct {
	// NoAdvertise keeps each node from telling its clients the other
	// nodes' addresses: a client stays on the URLs it was given.
	NoAdvertise bool
}

// Cluster is a running set of nats-server processes.
type Cluster struct {
	t     testing.TB
	bin   string
	nodes []*node
}

type node struct {
	name    string
	conf    string
	client  int
	monitor int
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	out     *bytes.Buffer
	outMu   *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Start runs n nats-server nodes routed to each other as one JetStream
// cluster (one node alone is a plain JetStream server), with their
// storage under t.TempDir, waits until each answers /healthz, and stops
// them when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, n, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t, bin: Require(t)}
	dir := t.TempDir()
	ports := nexusproc.FreePorts(t, 3*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3*i+1]))
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
`, name, ports[3*i], ports[3*i+2], filepath.Join(dir, name))
		if n > 1 {
			// One node alone is no cluster: its JetStream would wait for
			// a meta leader forever.
			adv := ""
			if o.NoAdvertise {
				adv = "  no_advertise: true\n"
			}
			conf += fmt.Sprintf("cluster {\n  name: nexus-e2e\n  listen: 127.0.0.1:%d\n  routes: [%s]\n%s}\n", ports[3*i+1], strings.Join(routes, ", "), adv)
		}
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, &node{name: name, conf: path, client: ports[3*i], monitor: ports[3*i+2], out: &bytes.Buffer{}, outMu: &sync.Mutex{}})
	}
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
		if t.Failed() {
			for _, nd := range c.nodes {
				nd.outMu.Lock()
				t.Logf("nats-server %s output (tail):\n%s", nd.name, tail(nd.out.String(), 3000))
				nd.outMu.Unlock()
			}
		}
	})
	c.WaitHealthy(60 * time.Second)
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *Cluster) start(i int) {
	c.t.Helper()
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd != nil {
		return
	}
	cmd := exec.Command(c.bin, "-c", nd.conf)
	w := lockedWriter{mu: nd.outMu, b: nd.out}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("nats-server %s: %v", nd.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	nd.cmd, nd.done = cmd, done
}

// URLs are the client URLs of every node, comma-separated.
func (c *Cluster) URLs() string {
	var us []string
	for _, nd := range c.nodes {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", nd.client))
	}
	return strings.Join(us, ",")
}

// URL is the client URL of node i.
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].client)
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Stop stops node i (SIGTERM, then SIGKILL after 10s); its storage stays.
// A paused node is continued first.
func (c *Cluster) Stop(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Signal(syscall.SIGCONT)
	_ = nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nd.done:
	case <-time.After(10 * time.Second):
		_ = nd.cmd.Process.Kill()
		<-nd.done
	}
	nd.cmd = nil
}

// Kill kills node i with SIGKILL (no shutdown, no flush) and waits for
// it to exit; its storage stays.
func (c *Cluster) Kill(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Kill()
	<-nd.done
	nd.cmd = nil
}

// Pause stops node i with SIGSTOP: its sockets stay open and nothing
// answers until Cont. It returns once every thread of the process is
// stopped, so that what the caller does next meets a stopped node.
func (c *Cluster) Pause(i int) { c.signal(i, syscall.SIGSTOP) }

// Cont continues node i after Pause (SIGCONT), and returns once it runs.
func (c *Cluster) Cont(i int) { c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, sig syscall.Signal) {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return
	}
	if err := nd.cmd.Process.Signal(sig); err != nil {
		c.t.Errorf("nats-server %s: %v: %v", nd.name, sig, err)
		return
	}
	stopped, want := sig == syscall.SIGSTOP, "running"
	if stopped {
		want = "stopped"
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, known := threadsStopped(nd.cmd.Process.Pid)
		if !known || all == stopped {
			return
		}
		if time.Now().After(deadline) {
			c.t.Errorf("nats-server %s: still not %s 10s after %v", nd.name, want, sig)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// threadsStopped reports whether every thread of process pid is stopped
// (state T in /proc); known is false where /proc cannot tell.
func threadsStopped(pid int) (all, known bool) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false, false
		}
		// pid (comm) state ...: the state follows the last ')'.
		j := bytes.LastIndexByte(b, ')')
		if j < 0 || j+2 >= len(b) {
			return false, false
		}
		if st := b[j+2]; st != 'T' && st != 't' {
			return false, true
		}
	}
	return true, true
}

// Running reports whether node i has a process (paused or not).
func (c *Cluster) Running(i int) bool {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd != nil
}

// Restart starts node i again on its ports and storage (nothing if it
// runs).
func (c *Cluster) Restart(i int) { c.start(i) }

// WaitHealthy waits until every running node's /healthz answers 200
// (JetStream up, with its meta leader).
func (c *Cluster) WaitHealthy(d time.Duration) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, nd := range c.nodes {
		nd.mu.Lock()
		running := nd.cmd != nil
		nd.mu.Unlock()
		if !running {
			continue
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/healthz", nd.monitor)
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if ctx.Err() != nil {
				c.t.Fatalf("nats-server %s not healthy after %v: %v", nd.name, d, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// Require returns nats-server's path. Without it the test fails when
// NEXUS_REQUIRE_TOOLS=1 (make test) and otherwise skips with a one-line
// reason, which also goes to the file $NEXUS_TEST_NOTES names (make test
// prints it: go test shows a passing package's output only with -v).
func Require(t testing.TB) string {
	t.Helper()
	p, err := Find()
	if err == nil {
		return p
	}
	if os.Getenv("NEXUS_REQUIRE_TOOLS") == "1" {
		t.Fatal(err)
	}
	line := fmt.Sprintf("%s skipped: %v", t.Name(), err)
	fmt.Fprintln(os.Stderr, line)
	if path := os.Getenv("NEXUS_TEST_NOTES"); path != "" {
		if f, ferr := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); ferr == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	t.Skip(line)
	return ""
}

// WaitNode waits up to d until node i's /healthz answers 200 (JetStream
// up and current); unlike WaitHealthy it never ends the test, so any
// goroutine may call it.
func (c *Cluster) WaitNode(i int, d time.Duration) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", c.nodes[i].monitor)
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats-server %s not healthy after %v: %w", c.nodes[i].name, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
