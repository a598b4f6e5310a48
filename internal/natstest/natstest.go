// Package natstest runs real NATS servers with JetStream in the test
// process, on loopback ports: one node, or a cluster of several that
// route to each other; optionally requiring TLS (with certificates from
// a throwaway PKI) and authentication (users, nkeys, or an operator
// with accounts and user credentials files, as nsc makes them). Nodes can be stopped and started again on the same
// ports and storage, which is how tests take NATS away and bring it back.
package natstest

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nexuspdp/nexus/internal/freeport"
)

// Cluster is a set of NATS servers with JetStream.
type Cluster struct {
	mu     sync.Mutex
	nodes  []*node
	client []nats.Option
	scheme string
}

// Options change how the servers of StartWith run.
type Options struct {
	// TLS, if set, makes every node require TLS from its clients with this
	// configuration: its Certificates are the server's, and ClientAuth
	// tls.RequireAndVerifyClientCert with ClientCAs asks for mutual TLS.
	// URLs are then tls://.
	TLS *tls.Config
	// Configure, if set, changes each node's options before it starts:
	// users, nkeys, or an operator and its accounts (see Operator).
	Configure func(*server.Options)
	// Client are the options the JetStream readiness check connects with:
	// the TLS and credentials the servers require.
	Client []nats.Option
}

type node struct {
	opts *server.Options
	srv  *server.Server
}

// Start runs n servers (n = 1: a single node; n > 1: a JetStream cluster)
// with their storage in t.TempDir, and stops them when the test ends. It
// returns once JetStream answers.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartWith(t, n, Options{})
}

// StartWith is Start with TLS or authentication.
func StartWith(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	c, err := NewWith(n, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.StopAll)
	return c
}

// New is Start for callers without a testing.TB (examples): storage goes
// under dir, and the caller stops the servers with StopAll.
func New(n int, dir string) (*Cluster, error) {
	return NewWith(n, dir, Options{})
}

// NewWith is New with TLS or authentication.
func NewWith(n int, dir string, opts Options) (*Cluster, error) {
	c := &Cluster{client: opts.Client, scheme: "nats"}
	if opts.TLS != nil {
		c.scheme = "tls"
	}
	ports, err := freeport.Ports(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	for i := range n {
		o := &server.Options{
			ServerName:             fmt.Sprintf("n%d", i+1),
			Host:                   "127.0.0.1",
			Port:                   ports[i],
			JetStream:              true,
			StoreDir:               filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			JetStreamMaxMemory:     64 << 20,
			JetStreamMaxStore:      16 << 30,
			NoLog:                  true,
			NoSigs:                 true,
			DisableJetStreamBanner: true,
		}
		if opts.TLS != nil {
			o.TLS, o.TLSConfig, o.TLSTimeout = true, opts.TLS, 5
			o.TLSVerify = opts.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		}
		if opts.Configure != nil {
			opts.Configure(o)
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "nexus-test", Host: "127.0.0.1", Port: ports[n+i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.nodes = append(c.nodes, &node{opts: o})
	}
	for i := range c.nodes {
		if err := c.start(i); err != nil {
			c.StopAll()
			return nil, err
		}
	}
	if err := c.waitJetStream(30 * time.Second); err != nil {
		c.StopAll()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.srv != nil {
		return nil
	}
	o := *nd.opts // the server keeps and changes its options
	s, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("natstest: node %d: %w", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("natstest: node %d not ready", i)
	}
	nd.srv = s
	return nil
}

// URLs are the client URLs of every node, running or not: tls://
// when the nodes require TLS, else nats://.
func (c *Cluster) URLs() []string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, fmt.Sprintf("%s://127.0.0.1:%d", c.scheme, nd.opts.Port))
	}
	return out
}

// Len is the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Stop shuts node i down (its storage stays).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	nd := c.nodes[i]
	s := nd.srv
	nd.srv = nil
	c.mu.Unlock()
	if s == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// Restart starts node i again on its ports and storage.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	if err := c.start(i); err != nil {
		t.Fatal(err)
	}
}

// StopAll shuts every node down.
func (c *Cluster) StopAll() {
	for i := range c.nodes {
		c.Stop(i)
	}
}

// RestartAll starts every stopped node again and waits for JetStream.
func (c *Cluster) RestartAll(t testing.TB) {
	t.Helper()
	for i := range c.nodes {
		c.Restart(t, i)
	}
	c.WaitJetStream(t, 60*time.Second)
}

// Index returns the node whose server name is name, or -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.opts.ServerName == name {
			return i
		}
	}
	return -1
}

// WaitJetStream waits until JetStream answers an account info request.
func (c *Cluster) WaitJetStream(t testing.TB, timeout time.Duration) {
	t.Helper()
	if err := c.waitJetStream(timeout); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) waitJetStream(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = c.ping(); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("natstest: JetStream not available after %v: %w", timeout, last)
}

func (c *Cluster) ping() error {
	nc, err := nats.Connect(strings.Join(c.URLs(), ","), append([]nats.Option{nats.Timeout(time.Second)}, c.client...)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}
