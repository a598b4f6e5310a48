package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nexuspdp/nexus/datastore"
)

// Defaults of Config.
const (
	DefaultName             = "nexus"
	DefaultMaxAge           = 7 * 24 * time.Hour
	DefaultMaxBytes         = 1 << 30
	DefaultSnapshotInterval = 5 * time.Minute
	DefaultSnapshotsKept    = 3
	DefaultWriteTimeout     = 5 * time.Second
	DefaultMaxRetries       = 20
	DefaultMaxWait          = 2 * time.Second
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Config configures a Replica. Store and URLs are required; the zero value
// of every other field means its documented default.
type Config struct {
	// URLs are the NATS servers to connect to (nats://host:4222 or
	// tls://host:4222); the client fails over between them. Required.
	URLs []string
	// Name names the cluster: its log is the JetStream stream
	// "nexus-<Name>" (subject "nexus.<Name>.log") and its snapshots and
	// policy bundles are in the object store bucket "nexus-<Name>", so
	// several clusters can share one NATS. Letters, digits, '_' and '-',
	// at most 64. Empty means DefaultName ("nexus").
	Name string
	// Store is this replica's local store, opened by the caller and
	// closed by the caller after Close. It must take writes only through
	// the Replica. Required. New makes its commits skip fsync
	// (datastore.BoltStore.Unsync) where the platform allows.
	Store *datastore.BoltStore

	// StreamReplicas is how many NATS servers keep the stream and the
	// object store (JetStream's R; 3 for a 3-node NATS cluster). It
	// applies when this replica creates them. Zero means as many as the
	// NATS cluster has servers, at most 3 (1 on a lone server, with a
	// warning: the log is then lost with that server's disk); 1 set
	// explicitly is logged as a warning too.
	StreamReplicas int
	// MaxAge and MaxBytes bound the stream's retention; older entries are
	// dropped, and a replica further behind restores a snapshot. They
	// apply when this replica creates the stream. Zero means
	// DefaultMaxAge (7 days) and DefaultMaxBytes (1 GiB).
	MaxAge   time.Duration
	MaxBytes int64
	// SnapshotInterval is how often this replica writes a snapshot of its
	// store to the object store, if its revision moved since the newest
	// snapshot there. It must be well under MaxAge. Zero means
	// DefaultSnapshotInterval (5m); negative turns this replica's
	// snapshots off (it still restores them).
	SnapshotInterval time.Duration
	// SnapshotsKept is how many of the newest snapshots are kept. Zero
	// means DefaultSnapshotsKept (3).
	SnapshotsKept int

	// WriteTimeout bounds one write, its retries included, when the
	// caller's context has no earlier deadline. No replica applies a
	// write the log took later than 3/5 of it after the write started
	// (its deadline); the rest is left to learn the outcome. Zero means
	// DefaultWriteTimeout (5s).
	WriteTimeout time.Duration
	// MaxRetries bounds how often one write is published again after a
	// conflict with another replica's write. Zero means
	// DefaultMaxRetries (20).
	MaxRetries int
	// MaxWait bounds WaitRevision. Zero means DefaultMaxWait (2s).
	MaxWait time.Duration

	// CredentialsFile is a NATS credentials file (a user JWT and its nkey
	// seed, as nsc writes them) for servers in decentralized
	// authentication (operator) mode; empty means none. New reads it and
	// rejects a file without both; the client reads it again on every
	// connection, so a file replaced in place is picked up at the next.
	CredentialsFile string
	// TLS configures TLS to the NATS servers: RootCAs to trust (nil means
	// the system's), Certificates for mutual TLS, ServerName when the
	// servers' certificates name another host than the URLs. With TLS set
	// the client requires TLS of every server and never falls back to
	// plain text. Nil means TLS only if a URL says tls:// or a server
	// requires it (then with the system's roots).
	TLS *tls.Config

	// OnPolicy, if set, is called with the policy bundle whenever the
	// policy in force changes after New returned: a policy load applied
	// from the log, or a restored snapshot with another policy. It runs on
	// the goroutine that applies the log, which waits for it: it must not
	// write through the Replica. The replica reports the revision of the
	// load (to WaitRevision, and to the loader) only once it returned. An
	// error is logged and counted; the log goes on.
	OnPolicy func(ctx context.Context, p Policy) error

	// Logger receives operational logs. Nil discards them.
	Logger *slog.Logger
	// Registerer receives the nexus_cluster_* metrics. Nil registers
	// nothing.
	Registerer prometheus.Registerer
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if len(c.URLs) == 0 {
		return errors.New("cluster: Config.URLs is required")
	}
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			return fmt.Errorf("cluster: Config.URLs: %q is not a URL like nats://host:4222", u)
		}
		switch p.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("cluster: Config.URLs: %q: scheme %q, want nats, tls, ws or wss", u, p.Scheme)
		}
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if !validName.MatchString(c.Name) {
		return fmt.Errorf("cluster: Config.Name %q: want 1 to 64 letters, digits, '_' or '-'", c.Name)
	}
	if c.Store == nil {
		return errors.New("cluster: Config.Store is required")
	}
	switch {
	case c.StreamReplicas < 0 || c.StreamReplicas > 5:
		return fmt.Errorf("cluster: Config.StreamReplicas %d out of range 1..5", c.StreamReplicas)
	}
	if err := orDefault("MaxAge", &c.MaxAge, DefaultMaxAge); err != nil {
		return err
	}
	if err := orDefault("MaxBytes", &c.MaxBytes, DefaultMaxBytes); err != nil {
		return err
	}
	if c.SnapshotInterval == 0 {
		c.SnapshotInterval = DefaultSnapshotInterval
	}
	if c.SnapshotInterval > 0 && c.SnapshotInterval > c.MaxAge/2 {
		return fmt.Errorf("cluster: Config.SnapshotInterval %v must be at most half of MaxAge %v, or a replica could find no snapshot that reaches the stream", c.SnapshotInterval, c.MaxAge)
	}
	if err := orDefault("SnapshotsKept", &c.SnapshotsKept, DefaultSnapshotsKept); err != nil {
		return err
	}
	if err := orDefault("WriteTimeout", &c.WriteTimeout, DefaultWriteTimeout); err != nil {
		return err
	}
	if err := orDefault("MaxRetries", &c.MaxRetries, DefaultMaxRetries); err != nil {
		return err
	}
	if err := orDefault("MaxWait", &c.MaxWait, DefaultMaxWait); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// orDefault sets the field name at v to def where it is zero and rejects
// it where it is negative.
func orDefault[T ~int | ~int64](name string, v *T, def T) error {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		return fmt.Errorf("cluster: Config.%s %v is negative", name, *v)
	}
	return nil
}

// names of the cluster's JetStream assets.
func (c *Config) streamName() string { return "nexus-" + c.Name }
func (c *Config) subject() string    { return "nexus." + c.Name + ".log" }
func (c *Config) bucket() string     { return "nexus-" + c.Name }
