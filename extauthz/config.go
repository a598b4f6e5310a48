package extauthz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/pdp"
)

// Default listener addresses and limits. The decision core's defaults
// (entrypoints, cache, evaluation deadline, body size) are pdp's.
const (
	DefaultGRPCAddr  = "127.0.0.1:9191"
	DefaultHTTPAddr  = "127.0.0.1:8181"
	DefaultAdminAddr = "127.0.0.1:8282"
	DefaultMaxBatch  = 400
)

// Default connection and stream limits (see Limits).
const (
	DefaultMaxConns             = 4096
	DefaultReadHeaderTimeout    = 10 * time.Second
	DefaultRequestTimeout       = 60 * time.Second
	DefaultIdleTimeout          = 5 * time.Minute
	DefaultMaxHeaderBytes       = 64 << 10
	DefaultGRPCStreamsPerConn   = 100
	DefaultGRPCMaxStreams       = 10000
	DefaultGRPCKeepaliveMinTime = 10 * time.Second
	DefaultGRPCKeepaliveTime    = time.Minute
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
)

// Limits bounds what clients may hold of a server: connections, time and
// gRPC streams. Every zero value means the default of the same name; a
// negative count or duration means no limit.
type Limits struct {
	// MaxConns bounds the open connections of each listener; beyond it
	// the listener stops accepting until one closes (new connections
	// wait in the kernel's queue). Default DefaultMaxConns.
	MaxConns int `yaml:"max_conns"`
	// ReadHeaderTimeout bounds the time to read an HTTP request's head.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// RequestTimeout bounds the time to read a whole HTTP request (head
	// and body) and, from the end of its head, to answer it, on the HTTP
	// and diagnostic listeners (the admin listener's imports and exports
	// may take longer: it has the head and idle limits alone); it also
	// ends a gRPC stream that named no deadline.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// IdleTimeout closes an HTTP keep-alive connection idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the size of an HTTP request's head.
	MaxHeaderBytes int `yaml:"-"`
	// GRPCStreamsPerConn bounds the concurrent streams of one gRPC
	// connection (HTTP/2 MAX_CONCURRENT_STREAMS).
	GRPCStreamsPerConn int `yaml:"-"`
	// GRPCMaxStreams bounds the gRPC streams in flight on all
	// connections; beyond it a new stream is refused at once with
	// RESOURCE_EXHAUSTED.
	GRPCMaxStreams int `yaml:"grpc_max_streams"`
	// GRPCKeepaliveMinTime is the shortest interval between a client's
	// pings the server allows; a client that pings more often is
	// disconnected.
	GRPCKeepaliveMinTime time.Duration `yaml:"-"`
	// GRPCKeepaliveTime and GRPCKeepaliveTimeout: the server pings a
	// connection silent for GRPCKeepaliveTime and closes it when no
	// answer comes within GRPCKeepaliveTimeout.
	GRPCKeepaliveTime, GRPCKeepaliveTimeout time.Duration `yaml:"-"`
}

// validate fills the defaults of l.
func (l *Limits) validate() {
	num := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	num(&l.MaxConns, DefaultMaxConns)
	num(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	num(&l.GRPCStreamsPerConn, DefaultGRPCStreamsPerConn)
	num(&l.GRPCMaxStreams, DefaultGRPCMaxStreams)
	dur(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	dur(&l.RequestTimeout, DefaultRequestTimeout)
	dur(&l.IdleTimeout, DefaultIdleTimeout)
	dur(&l.GRPCKeepaliveMinTime, DefaultGRPCKeepaliveMinTime)
	dur(&l.GRPCKeepaliveTime, DefaultGRPCKeepaliveTime)
	dur(&l.GRPCKeepaliveTimeout, DefaultGRPCKeepaliveTimeout)
}

// positive is d, or zero (none, for net/http and grpc-go) when negative.
func positive[T int | time.Duration](d T) T { return max(d, 0) }

// Writer takes the admin API's writes (see Config.Writer).
// *datastore.BoltStore and *cluster.Replica satisfy it.
type Writer interface {
	Write(ctx context.Context, req datastore.WriteRequest) (datastore.Revision, error)
	WriteSchema(ctx context.Context, sc *schema.Schema, force bool) (datastore.Revision, error)
}

var _ Writer = (*datastore.BoltStore)(nil)

// TLS configures TLS on one listener. The zero value means plain text.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, if set, requires and verifies client certificates
	// signed by these CAs (mTLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

func (t TLS) enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "" }

// MinSecretBytes is the shortest AdminToken or AppAPIKey accepted: a
// bearer secret guessable in a few tries is no secret.
const MinSecretBytes = 16

// Config configures a Server: its listeners, TLS, secrets, limits and
// the admin API. PDP and Store are required; every other zero value means
// the documented default. The decision core's own options (entrypoints,
// cache, evaluation deadline, body size, decision log) are pdp.Config's.
// The yaml keys are those of nexus serve's configuration file, which
// decodes into a Config; "-" marks what the file does not set.
type Config struct {
	// PDP is the decision core every transport asks. The server does not
	// own it: whoever built it closes it (pdp.PDP.Close, which flushes the
	// decision log) after Shutdown. Its MaxBodyBytes also bounds the HTTP
	// request bodies the server reads.
	PDP *pdp.PDP `yaml:"-"`
	// Store is the relationship store the admin API reads and writes and
	// the application API lists candidates from: the store the PDP reads.
	// If it has a Health() error method (*datastore.BoltStore has),
	// /readyz reports not ready while it returns an error, e.g. after the
	// store met a damaged data file.
	Store datastore.Store `yaml:"-"`

	// Writer takes the admin API's relationship and schema writes; nil
	// means Store. A cluster replica (cluster.Replica) puts them in the
	// cluster's log instead; when it also has LoadPolicy(ctx, bundle
	// []byte) (datastore.Revision, error), policy loads go through it too
	// and reach every replica's PDP (pdp.PDP.Load) from the log.
	Writer Writer `yaml:"-"`
	// Degraded, if set, is asked by /healthz: a non-empty reason makes it
	// answer {"status": "degraded", "reason": ..., plus details}, still
	// 200 (restarting would not help); /readyz is not affected.
	Degraded func() (reason string, details map[string]any) `yaml:"-"`

	// PolicySaver, if set, keeps the policies PUT /v1/policy loads across
	// restarts (a single node; a Writer that takes policy loads, a cluster
	// replica, is used instead). Save writes the bundle aside, calls load,
	// and makes the bundle the saved policy only when load succeeded.
	PolicySaver interface {
		Save(ctx context.Context, bundle []byte, revision string, load func() error) error
	} `yaml:"-"`

	// Writes, if set, says whether writes are available now (a cluster
	// replica: the log answers) and why not; /readyz reports it beside
	// the checks' readiness, which it does not change.
	Writes func() (available bool, reason string) `yaml:"-"`

	// Ready, if set, is one more readiness check: while it returns an
	// error, /readyz and /health answer not ready with it (a policy that
	// is still to come from a bundle server).
	Ready func() error `yaml:"-"`

	// GRPCAddr is the ext_authz gRPC listener; "" means DefaultGRPCAddr,
	// "-" disables it. "unix:///path/to.sock" listens on a Unix socket
	// (a stale socket at the path is removed first, as opa-envoy-plugin
	// does; any other file there fails Start), "unix://@name" on an
	// abstract one.
	GRPCAddr string `yaml:"grpc_addr"`
	// HTTPAddr is the HTTP listener (forward auth, AuthZEN, Permit APIs);
	// "" means DefaultHTTPAddr, "-" disables it.
	HTTPAddr string `yaml:"http_addr"`
	// AdminAddr is the admin listener; "" means DefaultAdminAddr, "-"
	// disables it.
	AdminAddr string `yaml:"admin_addr"`
	// DiagnosticAddr, if set, is a listener with the health and metrics
	// endpoints alone (/health as OPA answers it, /healthz, /readyz,
	// /metrics): what OPA's --diagnostic-addr serves, for probes and
	// scrapers that must not reach the other APIs. "" disables it.
	DiagnosticAddr string `yaml:"-"`
	// GRPCTLS, HTTPTLS and AdminTLS configure TLS per listener.
	GRPCTLS  TLS `yaml:"grpc_tls"`
	HTTPTLS  TLS `yaml:"http_tls"`
	AdminTLS TLS `yaml:"admin_tls"`
	// AdminToken is the bearer token the admin API requires (except
	// /healthz, /readyz and /metrics), at least MinSecretBytes long. It is
	// required unless the admin listener is disabled or AdminInsecure is
	// set.
	AdminToken string `yaml:"admin_token"`
	// AdminInsecure allows an admin listener without AdminToken: anyone
	// who reaches it may rewrite policy and relationships.
	AdminInsecure bool `yaml:"admin_insecure"`
	// AppAPIKey is the bearer token (Authorization: Bearer KEY) the
	// application endpoints on the HTTP listener require: AuthZEN
	// (/access/v1/...) and the Permit-compatible API. It is required
	// unless the HTTP listener is disabled or AppAPIInsecure is set; it is
	// at least MinSecretBytes long and may not be AdminToken. Forward auth (/ext_authz), /kong, the
	// AuthZEN metadata document, /healthz and /readyz need no key.
	AppAPIKey string `yaml:"app_api_key"`
	// AppAPIInsecure allows the application endpoints without AppAPIKey:
	// anyone who reaches the HTTP listener may ask for any decision.
	AppAPIInsecure bool `yaml:"app_api_insecure"`
	// PublicURL is the base URL applications reach the HTTP listener at
	// (https://pdp.example.com), as the AuthZEN metadata document
	// (/.well-known/authzen-configuration) announces it; "" means the
	// scheme and Host of each metadata request.
	PublicURL string `yaml:"public_url"`
	// Reflection registers the gRPC reflection service.
	Reflection bool `yaml:"reflection"`
	// Limits bounds connections, their time and gRPC streams.
	Limits Limits `yaml:",inline"`
	// wrapListener, if set, wraps each bound listener (tests inject
	// accept errors with it).
	wrapListener func(name string, l net.Listener) net.Listener
	// GRPCMaxRecvMsgSize bounds the size of a gRPC message the server
	// receives (larger ones are refused with RESOURCE_EXHAUSTED); zero
	// means grpc-go's default, 4 MiB, as opa-envoy-plugin's.
	GRPCMaxRecvMsgSize int `yaml:"-"`
	// GRPCMaxSendMsgSize bounds the size of a gRPC message the server
	// sends; zero means grpc-go's default (no practical bound).
	GRPCMaxSendMsgSize int `yaml:"-"`
	// PerformanceMetrics registers opa-envoy-plugin's performance metrics
	// (enable-performance-metrics): grpc_request_duration_seconds
	// {handler="check"} and error_counter{reason}.
	PerformanceMetrics bool `yaml:"-"`
	// PerformanceMetricsBuckets are the buckets of
	// grpc_request_duration_seconds; nil means the plugin's defaults.
	// They must be increasing.
	PerformanceMetricsBuckets []float64 `yaml:"-"`
	// Profiling serves Go's profiles under /debug/pprof/ on the admin
	// listener, behind AdminToken like the rest of the admin API.
	Profiling bool `yaml:"profiling"`

	// BundleLimits bound the files of a policy bundle uploaded to the
	// admin API (each file, data.json, the archive); zero fields mean
	// bundle's defaults.
	BundleLimits bundle.Limits `yaml:"-"`
	// MaxBatch bounds the checks in one batch request; zero means
	// DefaultMaxBatch.
	MaxBatch int `yaml:"-"`
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger `yaml:"-"`
	// Registerer receives the server's own metrics (PerformanceMetrics);
	// nil means a new registry (NewRegistry), served on /metrics. Pass the
	// registry the PDP's metrics go to (pdp.Config.Registerer), so that
	// /metrics serves them too.
	Registerer prometheus.Registerer `yaml:"-"`
	// Gatherer serves /metrics; nil means the Registerer if it is a
	// Gatherer.
	Gatherer prometheus.Gatherer `yaml:"-"`
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.PDP == nil {
		return errors.New("extauthz: Config.PDP is required")
	}
	if c.Store == nil {
		return errors.New("extauthz: Config.Store is required")
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.AdminAddr != "-" && c.AdminToken == "" && !c.AdminInsecure {
		return errors.New("extauthz: the admin listener needs an AdminToken (or AdminInsecure to run it open)")
	}
	if c.HTTPAddr != "-" && c.AppAPIKey == "" && !c.AppAPIInsecure {
		return errors.New("extauthz: the application endpoints need an AppAPIKey (or AppAPIInsecure to run them open)")
	}
	for _, cred := range []struct{ name, flag, value string }{{"AdminToken", "--admin-token", c.AdminToken}, {"AppAPIKey", "--app-api-key", c.AppAPIKey}} {
		if cred.value != "" && len(cred.value) < MinSecretBytes {
			return fmt.Errorf("extauthz: the %s (%s) is %d bytes; a bearer secret needs at least %d (e.g. openssl rand -hex 32)", cred.name, cred.flag, len(cred.value), MinSecretBytes)
		}
	}
	if c.AppAPIKey != "" && c.AppAPIKey == c.AdminToken {
		return errors.New("extauthz: the application API key may not be the admin token: applications would hold the keys to the admin API")
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("extauthz: PublicURL %q must be an http or https URL without a query or fragment", c.PublicURL)
		}
	}
	for name, t := range map[string]TLS{"grpc": c.GRPCTLS, "http": c.HTTPTLS, "admin": c.AdminTLS} {
		if t.enabled() && (t.CertFile == "" || t.KeyFile == "") {
			return fmt.Errorf("extauthz: %s TLS needs both a certificate and a key file", name)
		}
	}
	if c.GRPCMaxRecvMsgSize < 0 {
		return fmt.Errorf("extauthz: GRPCMaxRecvMsgSize %d is negative", c.GRPCMaxRecvMsgSize)
	}
	if c.GRPCMaxSendMsgSize < 0 {
		return fmt.Errorf("extauthz: GRPCMaxSendMsgSize %d is negative", c.GRPCMaxSendMsgSize)
	}
	for i, b := range c.PerformanceMetricsBuckets {
		if i > 0 && b <= c.PerformanceMetricsBuckets[i-1] {
			return fmt.Errorf("extauthz: PerformanceMetricsBuckets must be increasing, %v is not", c.PerformanceMetricsBuckets)
		}
	}
	switch {
	case c.MaxBatch < 0:
		return fmt.Errorf("extauthz: MaxBatch %d is negative", c.MaxBatch)
	case c.MaxBatch == 0:
		c.MaxBatch = DefaultMaxBatch
	}
	c.Limits.validate()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		reg := NewRegistry()
		c.Registerer = reg
		if c.Gatherer == nil {
			c.Gatherer = reg
		}
	}
	if c.Gatherer == nil {
		if g, ok := c.Registerer.(prometheus.Gatherer); ok {
			c.Gatherer = g
		} else {
			return errors.New("extauthz: Config.Gatherer is required when the Registerer is not a Gatherer")
		}
	}
	return nil
}

// NewRegistry returns the registry a Server serves on /metrics when
// Config.Registerer is nil: the process and Go collectors and the peak
// resident memory. Callers that register metrics of their own beside the
// server's (a cluster replica's) pass it as Config.Registerer.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nexus_process_peak_resident_memory_bytes",
			Help: "Peak resident set size of the process (VmHWM), for benchmark reports.",
		}, peakRSS),
	)
	return reg
}

// peakRSS reads VmHWM from /proc/self/status; 0 where there is no /proc.
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}
