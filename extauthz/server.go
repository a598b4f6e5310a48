package extauthz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/extauthz/internal/admin"
	"github.com/nexuspdp/nexus/extauthz/internal/appapi"
	"github.com/nexuspdp/nexus/extauthz/internal/envoygrpc"
	"github.com/nexuspdp/nexus/extauthz/internal/forwardauth"
	"github.com/nexuspdp/nexus/extauthz/internal/httpfast"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// Server is nexus' decision server: ext_authz gRPC, the HTTP APIs and the
// admin API over one decision core.
type Server struct {
	cfg    Config
	p      *pdp.PDP
	grpc   *grpc.Server
	health *health.Server
	// https are the HTTP listeners' servers: an http.Server, or for the
	// plain-text HTTP listener the fast path with its http.Server behind.
	https []interface {
		Shutdown(context.Context) error
		Close() error
	}

	metrics *envoygrpc.Metrics

	mu    sync.Mutex
	addrs map[string]net.Addr
	errc  chan error
}

// New validates cfg, loads the policy (with the schema's roles and
// permissions in its data) and returns a Server ready to Start.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, addrs: map[string]net.Addr{}, errc: make(chan error, 4)}
	if cfg.PerformanceMetrics {
		m, err := envoygrpc.NewMetrics(cfg.Registerer, cfg.PerformanceMetricsBuckets)
		if err != nil {
			return nil, fmt.Errorf("extauthz: performance metrics: %w", err)
		}
		s.metrics = m
	}
	p, err := pdp.New(ctx, cfg.pdpConfig())
	if err != nil {
		return nil, err
	}
	s.p = p
	return s, nil
}

// Addr returns the bound address of a listener ("grpc", "http", "admin"
// or "diagnostic") after Start, or nil.
func (s *Server) Addr(name string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[name]
}

// Reload reloads the current policy with the current schema.
func (s *Server) Reload(ctx context.Context) error { return s.p.Load(ctx, nil) }

// LoadPolicy replaces the policy with b (compiled with the current schema's
// roles and permissions). A bundle that cannot serve the configured
// entrypoints is refused and the previous policy stays in force.
func (s *Server) LoadPolicy(ctx context.Context, b *bundle.Bundle) error { return s.p.Load(ctx, b) }

// PolicyRevision is the revision of the policy in force.
func (s *Server) PolicyRevision() string { return s.p.PolicyRevision() }

func loadTLS(t TLS) (*tls.Config, error) {
	if !t.enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("extauthz: TLS key pair: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("extauthz: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("extauthz: client CA %s holds no PEM certificate", t.ClientCAFile)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Start binds every enabled listener and serves in the background. A
// listener that cannot bind fails Start, and nothing is left running.
func (s *Server) Start(ctx context.Context) error {
	type lis struct {
		name string
		l    net.Listener
		tls  *tls.Config
	}
	var ls []lis
	closeAll := func() {
		for _, l := range ls {
			_ = l.l.Close()
		}
	}
	for _, x := range []struct {
		name, addr string
		tls        TLS
	}{{"grpc", s.cfg.GRPCAddr, s.cfg.GRPCTLS}, {"http", s.cfg.HTTPAddr, s.cfg.HTTPTLS}, {"admin", s.cfg.AdminAddr, s.cfg.AdminTLS}, {"diagnostic", s.cfg.DiagnosticAddr, TLS{}}} {
		if x.addr == "-" || x.addr == "" {
			continue
		}
		tc, err := loadTLS(x.tls)
		if err != nil {
			closeAll()
			return fmt.Errorf("%s listener: %w", x.name, err)
		}
		network, addr := "tcp", x.addr
		if path, ok := strings.CutPrefix(x.addr, "unix://"); ok && x.name == "grpc" {
			network, addr = "unix", path
			if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
				_ = os.Remove(path) // a socket left by an earlier run; never another file
			}
		}
		var lc net.ListenConfig
		l, err := lc.Listen(ctx, network, addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("extauthz: %s listener: %w", x.name, err)
		}
		ls = append(ls, lis{x.name, l, tc})
		s.mu.Lock()
		s.addrs[x.name] = l.Addr()
		s.mu.Unlock()
	}
	for _, l := range ls {
		switch l.name {
		case "grpc":
			opts := []grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers()), grpc.ForceServerCodecV2(envoygrpc.NewCodec())}
			if l.tls != nil {
				opts = append(opts, grpc.Creds(credentials.NewTLS(l.tls)))
			}
			if s.cfg.GRPCMaxRecvMsgSize > 0 {
				opts = append(opts, grpc.MaxRecvMsgSize(s.cfg.GRPCMaxRecvMsgSize))
			}
			if s.cfg.GRPCMaxSendMsgSize > 0 {
				opts = append(opts, grpc.MaxSendMsgSize(s.cfg.GRPCMaxSendMsgSize))
			}
			s.grpc = grpc.NewServer(opts...)
			authv3.RegisterAuthorizationServer(s.grpc, &envoygrpc.Server{PDP: s.p, Metrics: s.metrics})
			s.health = health.NewServer()
			healthpb.RegisterHealthServer(s.grpc, s.health)
			s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			s.health.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
			if s.cfg.Reflection {
				reflection.Register(s.grpc)
			}
			go func(l net.Listener) { s.errc <- s.grpc.Serve(l) }(l.l)
		default:
			var h http.Handler
			var mux *http.ServeMux // the HTTP listener's, routing its checks
			switch l.name {
			case "admin":
				h = s.adminHandler()
			case "diagnostic":
				h = s.diagnosticHandler()
			default:
				mux = s.httpHandler()
				h = mux
			}
			hs := &http.Server{
				Handler: h, TLSConfig: l.tls, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
				ErrorLog: slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
			}
			var fast *httpfast.Server
			if mux != nil && l.tls == nil && !s.cfg.HTTPStdOnly {
				fast = &httpfast.Server{
					Fallback: hs, Route: checkRoutes(mux), MaxBodyBytes: s.cfg.MaxBodyBytes,
					ReadHeaderTimeout: hs.ReadHeaderTimeout, Log: s.cfg.Logger,
				}
				s.https = append(s.https, fast)
			} else {
				s.https = append(s.https, hs)
			}
			go func(l net.Listener, tlsOn bool) {
				var err error
				switch {
				case fast != nil:
					err = fast.Serve(l)
				case tlsOn:
					err = hs.ServeTLS(l, "", "")
				default:
					err = hs.Serve(l)
				}
				if errors.Is(err, http.ErrServerClosed) {
					err = nil
				}
				s.errc <- err
			}(l.l, l.tls != nil)
		}
		s.cfg.Logger.Info("listening", "listener", l.name, "addr", l.l.Addr().String(), "tls", l.tls != nil)
	}
	return nil
}

// Shutdown stops accepting, lets in-flight requests finish until ctx ends
// (then cuts them), and flushes the decision log.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.health != nil {
		s.health.Shutdown()
	}
	var wg sync.WaitGroup
	if s.grpc != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.grpc.Stop()
			}
		})
	}
	var errs []error
	var emu sync.Mutex
	for _, hs := range s.https {
		wg.Go(func() {
			if err := hs.Shutdown(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
				_ = hs.Close()
			}
		})
	}
	wg.Wait()
	if err := s.p.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run starts the server and serves until ctx ends or a listener fails,
// then shuts down gracefully, giving in-flight requests up to grace.
func (s *Server) Run(ctx context.Context, grace time.Duration) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-s.errc:
		runErr = err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	s.cfg.Logger.Info("shutting down", "grace", grace)
	return errors.Join(runErr, s.Shutdown(sctx))
}

// streamWorkers is the number of goroutines that serve gRPC streams. They
// keep their grown stacks, where a goroutine per stream starts small and
// grows its stack on every request; streams beyond them get a goroutine
// each. A saturated server has as many streams in flight as its callers
// send: with 8 a core and 64 callers, growing the new goroutines' stacks
// took 28% of a saturated server's CPU, with 64 a core 5%, for 16% more
// checks a second. Workers that never ran hold only their first stack.
func streamWorkers() uint32 {
	return uint32(64 * runtime.GOMAXPROCS(0))
}

// checkRoutes routes the check endpoints of the HTTP listener, whose
// plain-text connections httpfast serves (it hands a connection to
// net/http at its first request for another path). A check path with a
// method mux registers goes straight to its handler, with mux's pattern:
// what mux would choose, chosen once. Other methods and forward auth's
// subpaths go through mux.
func checkRoutes(mux *http.ServeMux) func(method, path string) (http.Handler, string) {
	type route struct {
		h       http.Handler
		pattern string
	}
	paths := []string{"/allowed", "/access/v1/evaluation", "/access/v1/evaluations", "/nginx_allowed", "/kong", forwardauth.Prefix}
	direct := make(map[[2]string]route)
	for _, path := range paths {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
			h, pattern := mux.Handler(&http.Request{Method: method, URL: &url.URL{Path: path}, Host: "nexus"})
			if pattern != "" {
				direct[[2]string{method, path}] = route{h, pattern}
			}
		}
	}
	return func(method, path string) (http.Handler, string) {
		if r, ok := direct[[2]string{method, path}]; ok {
			return r.h, r.pattern
		}
		if slices.Contains(paths, path) || strings.HasPrefix(path, forwardauth.Prefix+"/") {
			return mux, ""
		}
		return nil, ""
	}
}

// httpHandler serves the proxies' and applications' listener.
func (s *Server) httpHandler() *http.ServeMux {
	mux := http.NewServeMux()
	(&forwardauth.Handler{PDP: s.p, MaxBodyBytes: s.cfg.MaxBodyBytes}).Register(mux)
	(&appapi.API{
		PDP: s.p, Store: s.cfg.Store, MaxBodyBytes: s.cfg.MaxBodyBytes, MaxBatch: s.cfg.MaxBatch,
		APIKey: s.cfg.AppAPIKey, PublicURL: s.cfg.PublicURL, Log: s.cfg.Logger,
	}).Register(mux)
	s.probes(mux)
	return mux
}

// adminHandler serves the admin listener.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	(&admin.API{
		PDP: s.p, Store: s.cfg.Store, Writer: s.cfg.Writer, Token: s.cfg.AdminToken, Profiling: s.cfg.Profiling,
		Gatherer: s.cfg.Gatherer, MaxBodyBytes: s.cfg.MaxBodyBytes, Log: s.cfg.Logger,
	}).Register(mux)
	s.probes(mux)
	return mux
}

// diagnosticHandler serves the diagnostic listener: health and metrics
// alone.
func (s *Server) diagnosticHandler() http.Handler {
	mux := http.NewServeMux()
	s.probes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	return mux
}

// readiness is nil when a policy is loaded and the store is healthy.
func (s *Server) readiness() func() error {
	h, _ := s.cfg.Store.(interface{ Health() error })
	return func() error {
		if !s.p.Ready() {
			return errors.New("no policy loaded")
		}
		if h != nil {
			if err := h.Health(); err != nil {
				return errors.New(wire.Describe(err))
			}
		}
		if s.cfg.Ready != nil {
			return s.cfg.Ready()
		}
		return nil
	}
}

func (s *Server) probes(mux *http.ServeMux) {
	if s.cfg.Degraded != nil {
		mux.HandleFunc("GET /healthz", wire.HealthzDegraded(s.cfg.Degraded))
	} else {
		mux.HandleFunc("GET /healthz", wire.Healthz)
	}
	var health []func() error
	if h, ok := s.cfg.Store.(interface{ Health() error }); ok {
		health = append(health, h.Health) // a damaged data file takes readiness down
	}
	if s.cfg.Ready != nil {
		health = append(health, s.cfg.Ready)
	}
	mux.HandleFunc("GET /readyz", wire.Readyz(s.p, s.cfg.Writes, health...))
	// /health answers as OPA's does, for the probes opa-envoy-plugin
	// deployments already have: 200 and {} when ready, 500 and an error
	// otherwise. Its query parameters (plugins, bundles) ask nothing more
	// of nexus, whose policy and plugin are ready together.
	ready := s.readiness()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			wire.WriteJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		wire.WriteJSON(w, http.StatusOK, struct{}{})
	})
}
