package extauthz

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/pdp"
	"github.com/nexuspdp/nexus/pdp/decider"
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
	MaxConns int
	// ReadHeaderTimeout bounds the time to read an HTTP request's head.
	ReadHeaderTimeout time.Duration
	// RequestTimeout bounds the time to read a whole HTTP request (head
	// and body) and, from the end of its head, to answer it, on the HTTP
	// and diagnostic listeners (the admin listener's imports and exports
	// may take longer: it has the head and idle limits alone); it also
	// ends a gRPC stream that named no deadline.
	RequestTimeout time.Duration
	// IdleTimeout closes an HTTP keep-alive connection idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the size of an HTTP request's head.
	MaxHeaderBytes int
	// GRPCStreamsPerConn bounds the concurrent streams of one gRPC
	// connection (HTTP/2 MAX_CONCURRENT_STREAMS).
	GRPCStreamsPerConn int
	// GRPCMaxStreams bounds the gRPC streams in flight on all
	// connections; beyond it a new stream is refused at once with
	// RESOURCE_EXHAUSTED.
	GRPCMaxStreams int
	// GRPCKeepaliveMinTime is the shortest interval between a client's
	// pings the server allows; a client that pings more often is
	// disconnected.
	GRPCKeepaliveMinTime time.Duration
	// GRPCKeepaliveTime and GRPCKeepaliveTimeout: the server pings a
	// connection silent for GRPCKeepaliveTime and closes it when no
	// answer comes within GRPCKeepaliveTimeout.
	GRPCKeepaliveTime, GRPCKeepaliveTimeout time.Duration
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
	CertFile, KeyFile string
	// ClientCAFile, if set, requires and verifies client certificates
	// signed by these CAs (mTLS).
	ClientCAFile string
}

func (t TLS) enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "" }

// MinSecretBytes is the shortest AdminToken or AppAPIKey accepted: a
// bearer secret guessable in a few tries is no secret.
const MinSecretBytes = 16

// Config configures a Server. Engine, Store and Policy are required; every
// other zero value means the documented default.
type Config struct {
	// Engine evaluates policies. Its registry must hold the relationship
	// builtins (datastore/builtins) for policies that use them.
	Engine *engine.Engine
	// Store is the relationship store. If it has a Health() error method
	// (*datastore.BoltStore has), /readyz reports not ready while it
	// returns an error, e.g. after the store met a damaged data file.
	Store datastore.Store
	// Policy is the compiled policy. The server adds the schema's tenant
	// roles (data.nexus.roles: role to grants) and each type's permissions
	// (data.nexus.permissions) to its data before loading it, and again
	// whenever the schema changes.
	Policy *bundle.Bundle

	// Writer takes the admin API's relationship and schema writes; nil
	// means Store. A cluster replica (cluster.Replica) puts them in the
	// cluster's log instead; when it also has LoadPolicy(ctx, bundle
	// []byte) (datastore.Revision, error), policy loads go through it too
	// and reach the server through LoadPolicy on every replica.
	Writer Writer
	// Revisions waits for the consistency tokens checks carry (the
	// x-nexus-revision header, context.nexus_revision); nil means the
	// store's own revision, waited for at most RevisionWait.
	Revisions pdp.RevisionWaiter
	// RevisionWait bounds the default wait for a consistency token; zero
	// means pdp.DefaultRevisionWait.
	RevisionWait time.Duration
	// Degraded, if set, is asked by /healthz: a non-empty reason makes it
	// answer {"status": "degraded", "reason": ..., plus details}, still
	// 200 (restarting would not help); /readyz is not affected.
	Degraded func() (reason string, details map[string]any)

	// PolicySaver, if set, keeps the policies PUT /v1/policy loads across
	// restarts (a single node; a Writer that takes policy loads, a cluster
	// replica, is used instead). Save writes the bundle aside, calls load,
	// and makes the bundle the saved policy only when load succeeded.
	PolicySaver interface {
		Save(ctx context.Context, bundle []byte, revision string, load func() error) error
	}

	// Writes, if set, says whether writes are available now (a cluster
	// replica: the log answers) and why not; /readyz reports it beside
	// the checks' readiness, which it does not change.
	Writes func() (available bool, reason string)

	// Ready, if set, is one more readiness check: while it returns an
	// error, /readyz and /health answer not ready with it (a policy that
	// is still to come from a bundle server).
	Ready func() error

	// GRPCAddr is the ext_authz gRPC listener; "" means DefaultGRPCAddr,
	// "-" disables it. "unix:///path/to.sock" listens on a Unix socket
	// (a stale socket at the path is removed first, as opa-envoy-plugin
	// does; any other file there fails Start), "unix://@name" on an
	// abstract one.
	GRPCAddr string
	// HTTPAddr is the HTTP listener (forward auth, AuthZEN, Permit APIs);
	// "" means DefaultHTTPAddr, "-" disables it.
	HTTPAddr string
	// AdminAddr is the admin listener; "" means DefaultAdminAddr, "-"
	// disables it.
	AdminAddr string
	// DiagnosticAddr, if set, is a listener with the health and metrics
	// endpoints alone (/health as OPA answers it, /healthz, /readyz,
	// /metrics): what OPA's --diagnostic-addr serves, for probes and
	// scrapers that must not reach the other APIs. "" disables it.
	DiagnosticAddr string
	// GRPCTLS, HTTPTLS and AdminTLS configure TLS per listener.
	GRPCTLS, HTTPTLS, AdminTLS TLS
	// AdminToken is the bearer token the admin API requires (except
	// /healthz, /readyz and /metrics), at least MinSecretBytes long. It is
	// required unless the admin listener is disabled or AdminInsecure is
	// set.
	AdminToken string
	// AdminInsecure allows an admin listener without AdminToken: anyone
	// who reaches it may rewrite policy and relationships.
	AdminInsecure bool
	// AppAPIKey is the bearer token (Authorization: Bearer KEY) the
	// application endpoints on the HTTP listener require: AuthZEN
	// (/access/v1/...) and the Permit-compatible API. It is required
	// unless the HTTP listener is disabled or AppAPIInsecure is set; it is
	// at least MinSecretBytes long and may not be AdminToken. Forward auth (/ext_authz), /kong, the
	// AuthZEN metadata document, /healthz and /readyz need no key.
	AppAPIKey string
	// AppAPIInsecure allows the application endpoints without AppAPIKey:
	// anyone who reaches the HTTP listener may ask for any decision.
	AppAPIInsecure bool
	// PublicURL is the base URL applications reach the HTTP listener at
	// (https://pdp.example.com), as the AuthZEN metadata document
	// (/.well-known/authzen-configuration) announces it; "" means the
	// scheme and Host of each metadata request.
	PublicURL string
	// Reflection registers the gRPC reflection service.
	Reflection bool
	// Limits bounds connections, their time and gRPC streams.
	Limits Limits
	// wrapListener, if set, wraps each bound listener (tests inject
	// accept errors with it).
	wrapListener func(name string, l net.Listener) net.Listener
	// GRPCMaxRecvMsgSize bounds the size of a gRPC message the server
	// receives (larger ones are refused with RESOURCE_EXHAUSTED); zero
	// means grpc-go's default, 4 MiB, as opa-envoy-plugin's.
	GRPCMaxRecvMsgSize int
	// GRPCMaxSendMsgSize bounds the size of a gRPC message the server
	// sends; zero means grpc-go's default (no practical bound).
	GRPCMaxSendMsgSize int
	// PerformanceMetrics registers opa-envoy-plugin's performance metrics
	// (enable-performance-metrics): grpc_request_duration_seconds
	// {handler="check"} and error_counter{reason}.
	PerformanceMetrics bool
	// PerformanceMetricsBuckets are the buckets of
	// grpc_request_duration_seconds; nil means the plugin's defaults.
	// They must be increasing.
	PerformanceMetricsBuckets []float64
	// DryRun answers every Envoy ext_authz gRPC decision with an allow,
	// while the decision log and the metrics keep the policy's decision
	// (opa-envoy-plugin's dry-run).
	DryRun bool
	// SkipRequestBodyParse leaves the request body out of the input
	// document of Envoy and forward-auth requests (opa-envoy-plugin's
	// skip-request-body-parse); see pdp.Config.SkipRequestBodyParse.
	SkipRequestBodyParse bool
	// Profiling serves Go's profiles under /debug/pprof/ on the admin
	// listener, behind AdminToken like the rest of the admin API.
	Profiling bool

	// EnvoyEntrypoint answers ext_authz and forward-auth requests; ""
	// means pdp.DefaultEnvoyEntrypoint; pdp.Disabled turns
	// these checks off. Its result is a boolean or an
	// opa-envoy-plugin result object.
	EnvoyEntrypoint string
	// AuthzEntrypoint answers AuthZEN and Permit checks; "" means
	// pdp.DefaultAuthzEntrypoint (pdp.Disabled: off). Its result is a boolean or an object with
	// "allow" (or "allowed") and "reason".
	AuthzEntrypoint string

	// MaxBodyBytes bounds request bodies; zero means pdp.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BundleLimits bound the files of a policy bundle uploaded to the
	// admin API (each file, data.json, the archive); zero fields mean
	// bundle's defaults.
	BundleLimits bundle.Limits
	// MaxBatch bounds the checks in one batch request; zero means
	// DefaultMaxBatch.
	MaxBatch int
	// EvalTimeout bounds one evaluation; zero means pdp.DefaultEvalTimeout.
	EvalTimeout time.Duration
	// CacheSize bounds the decision cache (entries); zero means
	// pdp.DefaultCacheSize.
	CacheSize int
	// CacheDisabled turns the decision cache off.
	CacheDisabled bool
	// WasmOnly runs every decision in the policy's Wasm. By default, when
	// the loaded policy is nexus' default policy as nexus compiles it, the
	// server makes its decisions in Go, exactly as its Wasm would (see
	// pdp.Config.Relations); WasmOnly turns that off, to compare.
	WasmOnly bool
	// CacheNondeterministic caches decisions of policies that can call
	// non-deterministic builtins (or whose bundle does not say) like any
	// other; see pdp.Config.CacheNondeterministic.
	CacheNondeterministic bool

	// DecisionLog receives one policy.decision JSON line per decision;
	// nil disables the decision log.
	DecisionLog io.Writer
	// DecisionLogQueue bounds the events waiting to be written; zero
	// means 4096. A full queue drops events (counted), never blocks.
	DecisionLogQueue int
	// DecisionSink receives every decision with the input the policy saw
	// and its raw result: the decision log in OPA's format. Nil means
	// none. The caller closes it after Shutdown (which flushes nothing
	// of it).
	DecisionSink pdp.DecisionSink
	// MaskDecision and DropDecision are the decision log's mask and drop
	// rules (OPA's decision_logs.mask_decision and drop_decision); ""
	// means pdp.DefaultMaskDecision and pdp.DefaultDropDecision. They are
	// evaluated only when the policy bundle has them.
	MaskDecision, DropDecision string

	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil means a new registry, served
	// on /metrics.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; nil means the Registerer if it is a
	// Gatherer.
	Gatherer prometheus.Gatherer
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Engine == nil {
		return errors.New("extauthz: Config.Engine is required")
	}
	if c.Store == nil {
		return errors.New("extauthz: Config.Store is required")
	}
	if c.Policy == nil {
		return errors.New("extauthz: Config.Policy is required")
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
	switch {
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("extauthz: MaxBodyBytes %d is negative", c.MaxBodyBytes)
	case c.MaxBodyBytes == 0:
		c.MaxBodyBytes = pdp.DefaultMaxBodyBytes
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
	pc := c.pdpConfig()
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("extauthz: %w", err)
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

// pdpConfig is the decision core's part of c.
func (c *Config) pdpConfig() pdp.Config {
	var relations builtins.Store
	var deciders []decider.Factory
	if !c.WasmOnly {
		relations = c.Store
		deciders = []decider.Factory{policy.Decider(c.Store)}
	}
	return pdp.Config{
		Engine: c.Engine, Store: c.Store, Relations: relations, Deciders: deciders, Policy: c.Policy,
		EnvoyEntrypoint: c.EnvoyEntrypoint, AuthzEntrypoint: c.AuthzEntrypoint,
		MaxBodyBytes: c.MaxBodyBytes, EvalTimeout: c.EvalTimeout,
		SkipRequestBodyParse: c.SkipRequestBodyParse, DryRun: c.DryRun,
		CacheSize: c.CacheSize, CacheDisabled: c.CacheDisabled, CacheNondeterministic: c.CacheNondeterministic,
		DecisionLog: c.DecisionLog, DecisionLogQueue: c.DecisionLogQueue,
		DecisionSink: c.DecisionSink, MaskDecision: c.MaskDecision, DropDecision: c.DropDecision,
		Revisions: c.Revisions, RevisionWait: c.RevisionWait,
		Logger: c.Logger, Registerer: c.Registerer,
	}
}
