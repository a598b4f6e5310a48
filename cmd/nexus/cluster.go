package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/cluster"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"
)

// clusterConfig is the "cluster" section of the serve config: with NATS
// URLs, nexus runs as one replica of a cluster whose writes go through a
// NATS JetStream log.
type clusterConfig struct {
	NATSURLs []string `yaml:"nats_urls"`
	// Name names the cluster's stream and bucket (default "nexus").
	Name string `yaml:"name"`
	// StreamReplicas is JetStream's R for the stream and the bucket when
	// this replica creates them (3 on a 3-node NATS cluster).
	StreamReplicas int `yaml:"stream_replicas"`
	// Credentials is a NATS credentials file (user JWT and nkey seed).
	Credentials string     `yaml:"credentials"`
	TLS         clusterTLS `yaml:"tls"`
	// SyncTimeout bounds how long a starting replica waits to catch up
	// with the log (default 30s).
	SyncTimeout time.Duration `yaml:"sync_timeout"`
	// WriteTimeout bounds one write (default 5s, at most 5s): a write the
	// log takes later than 3/5 of it is applied by no replica.
	WriteTimeout time.Duration `yaml:"write_timeout"`
}

// clusterTLS is TLS to the NATS servers. Any field set makes TLS
// required of every server (no plain-text fallback).
type clusterTLS struct {
	// CAFile holds the CAs that sign the servers' certificates (PEM);
	// empty means the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are this replica's client certificate, for
	// servers that require one (mutual TLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the servers' certificates must hold, when
	// the URLs name them otherwise (by address); empty means the URL's
	// host.
	ServerName string `yaml:"server_name"`
}

func (c clusterConfig) enabled() bool { return len(c.NATSURLs) > 0 }

// defaultSyncTimeout bounds how long a starting replica waits to catch up
// with the log before it serves from what it has.
const defaultSyncTimeout = 30 * time.Second

func addClusterFlags(f *pflag.FlagSet, c *serveConfig) {
	f.StringSliceVar(&c.Cluster.NATSURLs, "cluster", nil, "run as a cluster replica: NATS servers (nats://host:4222,...) whose JetStream log takes every write (default: single node)")
	f.StringVar(&c.Cluster.Name, "cluster-name", cluster.DefaultName, "cluster name: its stream is nexus-<name> (several clusters can share one NATS)")
	f.IntVar(&c.Cluster.StreamReplicas, "stream-replicas", 0, "NATS servers that keep the cluster log when this replica creates it (0: as many as the NATS cluster has, at most 3)")
	f.DurationVar(&c.Cluster.WriteTimeout, "write-timeout", cluster.DefaultWriteTimeout, "bound of one write through the cluster log (at most 5s); a write the log takes after 3/5 of it is never applied")
}

// maxWriteTimeout bounds --write-timeout: a client that gave up on a write
// should not see it applied long after.
const maxWriteTimeout = 5 * time.Second

func (t clusterTLS) config() (*tls.Config, error) {
	if t == (clusterTLS{}) {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cluster tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cluster tls: %s holds no PEM certificate", t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("cluster tls: cert_file and key_file go together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("cluster tls: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// checkReplicaStore refuses a replica's data directory whose store was
// written in single-node mode.
func checkReplicaStore(ctx context.Context, c serveConfig, store *datastore.BoltStore) error {
	if err := cluster.CheckStore(ctx, store); err != nil {
		return fmt.Errorf("serve --cluster: data directory %s: %w\n"+
			"A replica's store holds exactly the cluster log's history, so a data directory written in single-node mode cannot join a cluster. "+
			"Start the replica on an empty --data-dir, and copy the data in through the cluster (nexus rel export, then nexus rel import --admin-url against a replica)", c.DataDir, err)
	}
	return nil
}

// clusterNode is the cluster side of a serving replica: the Replica, the
// registry its metrics share with the server, and the link that loads the
// policies the log brings into the server.
type clusterNode struct {
	r     *cluster.Replica
	store *datastore.BoltStore
	reg   *prometheus.Registry
	log   *slog.Logger
	cfg   serveConfig

	mu  sync.Mutex // serialises policy loads from the log with attach
	pdp *pdp.PDP

	stop context.CancelFunc
	done chan struct{}
}

// startCluster starts the replica (nil in single-node mode), waits (at most
// the sync timeout) until it has applied the log, and on a cluster whose
// log is empty writes the schema (--schema, or the demo schema and
// relationships) through the log. With --schema on a cluster whose schema
// differs, the schema is written through the log too.
func startCluster(ctx context.Context, c serveConfig, store *datastore.BoltStore, log *slog.Logger) (*clusterNode, error) {
	if !c.Cluster.enabled() {
		return nil, nil
	}
	tc, err := c.Cluster.TLS.config()
	if err != nil {
		return nil, err
	}
	if c.Cluster.WriteTimeout < 0 || c.Cluster.WriteTimeout > maxWriteTimeout {
		return nil, fmt.Errorf("cluster write timeout %v: want more than 0 and at most %v", c.Cluster.WriteTimeout, maxWriteTimeout)
	}
	if c.Cluster.StreamReplicas < 0 || c.Cluster.StreamReplicas > 5 {
		return nil, fmt.Errorf("cluster stream replicas %d: want 0 (as many as the NATS cluster has, at most 3) to 5", c.Cluster.StreamReplicas)
	}
	n := &clusterNode{store: store, reg: extauthz.NewRegistry(), log: log, cfg: c}
	r, err := cluster.New(ctx, cluster.Config{
		URLs: c.Cluster.NATSURLs, Name: c.Cluster.Name, Store: store, WriteTimeout: c.Cluster.WriteTimeout,
		StreamReplicas: c.Cluster.StreamReplicas, CredentialsFile: c.Cluster.Credentials, TLS: tc,
		OnPolicy: n.onPolicy, Logger: log, Registerer: n.reg,
	})
	if err != nil {
		return nil, err
	}
	n.r = r
	timeout := c.Cluster.SyncTimeout
	if timeout <= 0 {
		timeout = defaultSyncTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	err = r.Sync(sctx)
	cancel()
	if err != nil {
		log.Warn("serving from local data before catching up with the cluster log (writes are refused until NATS answers)", "revision", r.Revision(), "err", err)
		return n, nil
	}
	log.Info("caught up with the cluster log", "cluster", c.Cluster.Name, "revision", r.Revision())
	if err := n.seed(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	return n, nil
}

// seed writes the configured schema through the log where the cluster's
// differs, and on an empty log without --schema the demo schema and
// relationships, as a single node does on its first start.
func (n *clusterNode) seed(ctx context.Context) error {
	cur, err := n.store.Schema(ctx)
	if err != nil && !errors.Is(err, datastore.ErrNoSchema) {
		return err
	}
	if n.cfg.Schema != "" {
		sc, err := schemaChange(n.cfg.Schema, cur)
		if err != nil || sc == nil {
			return err
		}
		if err := n.seedWrite(ctx, "schema", func(ctx context.Context) error {
			_, err := n.r.WriteSchema(ctx, sc, false)
			return err
		}); err != nil {
			return fmt.Errorf("schema through the cluster log: %w", err)
		}
		n.log.Info("wrote the schema through the cluster log", "file", n.cfg.Schema)
		return nil
	}
	if cur != nil || n.r.Revision() != 0 {
		return nil
	}
	sc, err := schema.Parse(drive.Schema)
	if err != nil {
		return err
	}
	if err := n.seedWrite(ctx, "demo-schema", func(ctx context.Context) error {
		_, err := n.r.WriteSchema(ctx, sc, false)
		return err
	}); err != nil {
		return fmt.Errorf("demo schema through the cluster log: %w", err)
	}
	touches, err := tupleLines(bytes.NewReader(drive.Tuples), "demo tuples")
	if err != nil {
		return err
	}
	if err := n.seedWrite(ctx, "demo-tuples", func(ctx context.Context) error {
		_, err := n.r.Write(ctx, datastore.WriteRequest{Touches: touches})
		return err
	}); err != nil {
		return fmt.Errorf("demo tuples through the cluster log: %w", err)
	}
	n.log.Info("wrote the demo schema and relationships through the cluster log", "tuples", len(touches))
	return nil
}

// seedAttempts bounds how often seedWrite asks again about one write.
const seedAttempts = 5

// seedWrite makes write, one write of the seed, under a write ID of its
// own (what names it, after a random prefix). A fresh cluster may take
// the write into its log and deliver it to this replica only after the
// write's bound, which answers "outcome unknown": seedWrite then asks
// again under the same ID, which gets the first attempt's outcome once it
// applies instead of writing twice, up to seedAttempts times.
func (n *clusterNode) seedWrite(ctx context.Context, what string, write func(context.Context) error) error {
	id := "seed-" + rand.Text() + "-" + what
	wctx := api.WithNewWriteID(ctx, id) // no earlier attempt: "not written" stays an answer
	for i := 1; ; i++ {
		err := write(wctx)
		wctx = api.WithWriteID(ctx, id)
		if err == nil || !errors.Is(err, cluster.ErrOutcomeUnknown) || i == seedAttempts {
			return err
		}
		n.log.Warn("the seed write's outcome is not known yet; asking again", "write", id, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(i) * 200 * time.Millisecond):
		}
	}
}

// policy returns the policy the cluster's log loaded last, or ok false if
// it loaded none.
func (n *clusterNode) policy(ctx context.Context) (*bundle.Bundle, bool, error) {
	p, err := n.r.Policy(ctx)
	if errors.Is(err, cluster.ErrNoPolicy) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	b, err := n.readPolicy(p)
	return b, err == nil, err
}

// readPolicy reads a policy of the log as this replica serves it, with
// the trusted subject header.
func (n *clusterNode) readPolicy(p cluster.Policy) (*bundle.Bundle, error) {
	b, err := bundle.ReadLimited(bytes.NewReader(p.Bundle), n.cfg.bundleLimits())
	if err != nil {
		return nil, fmt.Errorf("the cluster's policy (revision %d): %w", p.Revision, err)
	}
	return trustSubjectHeader(b, n.cfg.TrustedSubjectHeader)
}

// loadPolicy is the policy to start with: the cluster's, if its log loaded
// one, else the configured one.
func (n *clusterNode) loadPolicy(ctx context.Context, c serveConfig, log *slog.Logger) (*bundle.Bundle, error) {
	if n != nil {
		b, ok, err := n.policy(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			n.log.Info("starting with the policy loaded through the cluster", "policy_revision", b.Manifest.Revision)
			return b, nil
		}
	}
	var b *bundle.Bundle
	var err error
	if n != nil {
		b, err = loadPolicy(ctx, c)
	} else {
		b, err = singleNodePolicy(ctx, c, log)
	}
	if err != nil {
		return nil, err
	}
	return trustSubjectHeader(b, c.TrustedSubjectHeader)
}

// configure makes the server write through the log, wait for consistency
// tokens on the replica, report degraded health and serve the replica's
// metrics.
func (n *clusterNode) configure(core *pdp.Config, cfg *extauthz.Config) {
	if n == nil {
		return
	}
	cfg.Writer = clusterWriter{n.r}
	core.Revisions = n.r
	cfg.Registerer, cfg.Gatherer = n.reg, n.reg
	cfg.Degraded = n.degraded
	cfg.Writes = n.writes
	ready := cfg.Ready
	cfg.Ready = func() error {
		if err := n.ready(); err != nil {
			return err
		}
		if ready != nil {
			return ready()
		}
		return nil
	}
}

// writes says whether writes through the log are available now.
func (n *clusterNode) writes() (bool, string) {
	st := n.r.Status()
	if !st.Degraded {
		return true, ""
	}
	return false, st.Reason
}

// ready refuses a replica with nothing to answer from: its store is empty
// and it never read the cluster's log (it could not find, create or read
// it). A replica with data answers from it while the log is away.
func (n *clusterNode) ready() error {
	st := n.r.Status()
	if st.Applied == 0 && !st.Followed {
		return fmt.Errorf("%w: this replica has not read the cluster log yet and its store is empty: %s", pdp.ErrNotReady, cmp.Or(st.Reason, "not yet read"))
	}
	return nil
}

func (n *clusterNode) degraded() (string, map[string]any) {
	st := n.r.Status()
	details := map[string]any{
		"cluster":      n.cfg.Cluster.Name,
		"connected":    st.Connected,
		"revision":     uint64(st.Applied),
		"stream_last":  st.StreamLast,
		"lag_messages": st.LagMessages,
		"lag_seconds":  st.Lag.Seconds(),
	}
	if !st.Degraded {
		return "", details
	}
	return cmp.Or(st.Reason, "the cluster log is unavailable") + ": writes are refused, checks answer from local data", details
}

// attach links the decision core: policies the log loads from now on go
// to it (and one it loaded since startup), and schema changes applied from
// the log reload its policy.
func (n *clusterNode) attach(ctx context.Context, p *pdp.PDP) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	n.pdp = p
	b, ok, err := n.policy(ctx)
	if err == nil && ok && b.Manifest.Revision != p.PolicyRevision() {
		err = p.Load(ctx, b)
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.stop, n.done = cancel, make(chan struct{})
	go n.followSchema(wctx)
	return nil
}

// onPolicy loads a policy applied from the log into the decision core.
func (n *clusterNode) onPolicy(ctx context.Context, p cluster.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pdp == nil {
		return nil // attach loads it
	}
	b, err := n.readPolicy(p)
	if err != nil {
		return err
	}
	if err := n.pdp.Load(ctx, b); err != nil {
		n.log.Error("the policy loaded through the cluster does not load here; the previous one stays in force", "revision", p.Revision, "err", err)
		return err
	}
	n.log.Info("loaded the policy from the cluster log", "revision", p.Revision, "policy_revision", b.Manifest.Revision)
	return nil
}

// followSchema reloads the policy (with the new roles and permissions)
// whenever the replica applies a schema change from the log.
func (n *clusterNode) followSchema(ctx context.Context) {
	defer close(n.done)
	for ctx.Err() == nil {
		from, err := n.store.Revision(ctx)
		if err != nil {
			return
		}
		for cs, err := range n.store.Watch(ctx, from) {
			if err != nil {
				if ctx.Err() == nil {
					n.log.Warn("following schema changes", "err", err)
				}
				break
			}
			if cs.Schema {
				if err := n.pdp.Load(ctx, nil); err != nil && ctx.Err() == nil {
					n.log.Error("reloading the policy after a schema change from the cluster log", "revision", cs.Revision, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		// The changelog moved on without us (a restored snapshot):
		// reload once, then follow from where the store is.
		_ = n.pdp.Load(ctx, nil)
	}
}

// close stops following and closes the replica (before the store).
func (n *clusterNode) close() {
	if n == nil {
		return
	}
	if n.stop != nil {
		n.stop()
		<-n.done
	}
	if err := n.r.Close(); err != nil {
		n.log.Error("closing the cluster replica", "err", err)
	}
}

// clusterWriter is the admin API's writer on a replica: the cluster's
// errors become the server's (503 for a log that cannot take the write,
// 413 for one too large for a log message).
type clusterWriter struct{ r *cluster.Replica }

func (w clusterWriter) Write(ctx context.Context, req datastore.WriteRequest) (datastore.Revision, error) {
	rev, err := w.r.Write(ctx, req)
	return rev, clusterError(rev, err)
}

func (w clusterWriter) WriteSchema(ctx context.Context, sc *schema.Schema, force bool) (datastore.Revision, error) {
	rev, err := w.r.WriteSchema(ctx, sc, force)
	return rev, clusterError(rev, err)
}

func (w clusterWriter) LoadPolicy(ctx context.Context, b []byte) (datastore.Revision, error) {
	rev, err := w.r.LoadPolicy(ctx, b)
	return rev, clusterError(rev, err)
}

// RemembersWriteIDs tells the admin API that the cluster keeps write IDs
// (Idempotency-Key) itself, in its log, for every replica.
func (clusterWriter) RemembersWriteIDs() {}

var _ extauthz.Writer = clusterWriter{}

func clusterError(rev datastore.Revision, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrTooLarge):
		return fmt.Errorf("%w: %w: split it into several writes", pdp.ErrTooLarge, err)
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		// First: an unknown outcome may name what it could not rule out.
		if errors.Is(err, cluster.ErrNotApplied) {
			return fmt.Errorf("%w: %w: the log took it at revision %d; retry with the same Idempotency-Key to learn its outcome", pdp.ErrOutcomeUnknown, err, rev)
		}
		return fmt.Errorf("%w: %w: retry with the same Idempotency-Key to learn its outcome", pdp.ErrOutcomeUnknown, err)
	case errors.Is(err, cluster.ErrContention), errors.Is(err, cluster.ErrUnavailable), errors.Is(err, cluster.ErrClosed):
		return fmt.Errorf("%w: %w", pdp.ErrUnavailable, err)
	}
	return err
}
