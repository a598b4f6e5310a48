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
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/nexuspdp/nexus/extauthz/internal/admin"
	"github.com/nexuspdp/nexus/extauthz/internal/appapi"
	"github.com/nexuspdp/nexus/extauthz/internal/envoygrpc"
	"github.com/nexuspdp/nexus/extauthz/internal/forwardauth"
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
	// https are the HTTP listeners' servers.
	https []*http.Server
	// streams bounds the gRPC streams in flight.
	streams *streamLimit
	// closing is set when Shutdown begins: a listener's end is then no
	// failure.
	closing atomic.Bool

	metrics *envoygrpc.Metrics

	mu    sync.Mutex
	addrs map[string]net.Addr
	// stopped names the first listener that stopped for good.
	stopped error
	errc    chan error
}

// New validates cfg and returns a Server over cfg.PDP, ready to Start.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, p: cfg.PDP, addrs: map[string]net.Addr{}, errc: make(chan error, 4)}
	if cfg.PerformanceMetrics {
		m, err := envoygrpc.NewMetrics(cfg.Registerer, cfg.PerformanceMetricsBuckets)
		if err != nil {
			return nil, fmt.Errorf("extauthz: performance metrics: %w", err)
		}
		s.metrics = m
	}
	return s, nil
}

// Addr returns the bound address of a listener ("grpc", "http", "admin"
// or "diagnostic") after Start, or nil.
func (s *Server) Addr(name string) net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[name]
}

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
	lim := s.cfg.Limits
	for i, l := range ls {
		base := l.l
		if s.cfg.wrapListener != nil {
			base = s.cfg.wrapListener(l.name, base)
		}
		g := net.Listener(&guardedListener{Listener: base, name: l.name, log: s.cfg.Logger})
		if lim.MaxConns > 0 {
			g = netutil.LimitListener(g, lim.MaxConns)
		}
		ls[i].l = g
	}
	for _, l := range ls {
		switch l.name {
		case "grpc":
			s.streams = &streamLimit{max: int64(positive(lim.GRPCMaxStreams)), timeout: positive(lim.RequestTimeout)}
			if s.streams.max == 0 {
				s.streams.max = 1 << 62
			}
			opts := []grpc.ServerOption{
				grpc.NumStreamWorkers(streamWorkers()), grpc.ForceServerCodecV2(envoygrpc.NewCodec()),
				grpc.InTapHandle(s.streams.tap),
				grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: positive(lim.GRPCKeepaliveMinTime), PermitWithoutStream: true}),
				grpc.KeepaliveParams(keepalive.ServerParameters{Time: positive(lim.GRPCKeepaliveTime), Timeout: positive(lim.GRPCKeepaliveTimeout)}),
			}
			if lim.GRPCStreamsPerConn > 0 {
				opts = append(opts, grpc.MaxConcurrentStreams(uint32(lim.GRPCStreamsPerConn)))
			}
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
			s.setServing()
			if s.cfg.Reflection {
				reflection.Register(s.grpc)
			}
			go func(l net.Listener) { s.served(l.Addr(), "grpc", s.grpc.Serve(l)) }(l.l)
		default:
			var h http.Handler
			hs := &http.Server{
				TLSConfig: l.tls, ReadHeaderTimeout: positive(lim.ReadHeaderTimeout), IdleTimeout: positive(lim.IdleTimeout),
				MaxHeaderBytes: positive(lim.MaxHeaderBytes),
				ErrorLog:       slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelDebug),
			}
			switch l.name {
			case "admin":
				h = s.adminHandler()
			case "diagnostic":
				h = s.diagnosticHandler()
			default:
				h = s.httpHandler()
			}
			if l.name != "admin" {
				hs.ReadTimeout, hs.WriteTimeout = positive(lim.RequestTimeout), positive(lim.RequestTimeout)
			}
			hs.Handler = h
			s.https = append(s.https, hs)
			go func(l net.Listener, name string, tlsOn bool) {
				var err error
				if tlsOn {
					err = hs.ServeTLS(l, "", "")
				} else {
					err = hs.Serve(l)
				}
				s.served(l.Addr(), name, err)
			}(l.l, l.name, l.tls != nil)
		}
		s.cfg.Logger.Info("listening", "listener", l.name, "addr", l.l.Addr().String(), "tls", l.tls != nil)
	}
	return nil
}

// served is called when a listener's server returns err. Unless the
// server is shutting down, the listener has stopped for good: the server
// reports it, is no longer ready (/readyz, gRPC health) and Failed
// delivers the error.
func (s *Server) served(addr net.Addr, name string, err error) {
	if s.closing.Load() || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		return
	}
	if err == nil {
		err = errors.New("stopped serving")
	}
	err = fmt.Errorf("extauthz: %s listener %s stopped: %w", name, addr, err)
	s.mu.Lock()
	if s.stopped == nil {
		s.stopped = fmt.Errorf("%w: the %s listener stopped", pdp.ErrUnavailable, name)
	}
	s.mu.Unlock()
	s.cfg.Logger.Error("listener stopped; the server is no longer ready", "listener", name, "addr", addr.String(), "err", err)
	s.setServing()
	select {
	case s.errc <- err:
	default:
	}
}

// listenersFailed is nil while every listener serves, else names the
// first one that stopped, for the probes.
func (s *Server) listenersFailed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// setServing sets gRPC health from listenersFailed.
func (s *Server) setServing() {
	if s.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if s.listenersFailed() != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, st)
}

// Failed delivers the error of a listener that stopped for good (never
// after Shutdown has begun). The server keeps serving on its other
// listeners; its owner should shut it down and exit.
func (s *Server) Failed() <-chan error { return s.errc }

// StreamsRefused is the number of gRPC streams refused over
// Limits.GRPCMaxStreams.
func (s *Server) StreamsRefused() int64 {
	if s.streams == nil {
		return 0
	}
	return s.streams.refused.Load()
}

// Shutdown stops accepting and lets in-flight requests finish until ctx
// ends (then cuts them). It leaves the PDP open: its owner closes it
// afterwards, which flushes the decision log.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
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
	return errors.Join(errs...)
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

// httpHandler serves the proxies' and applications' listener.
func (s *Server) httpHandler() *http.ServeMux {
	mux := http.NewServeMux()
	(&forwardauth.Handler{PDP: s.p, MaxBodyBytes: s.p.MaxBodyBytes()}).Register(mux)
	(&appapi.API{
		PDP: s.p, Store: s.cfg.Store, MaxBodyBytes: s.p.MaxBodyBytes(), MaxBatch: s.cfg.MaxBatch,
		APIKey: s.cfg.AppAPIKey, PublicURL: s.cfg.PublicURL, Log: s.cfg.Logger,
	}).Register(mux)
	s.probes(mux)
	return mux
}

// adminHandler serves the admin listener.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	(&admin.API{
		PDP: s.p, Store: s.cfg.Store, Writer: s.cfg.Writer, Saver: s.cfg.PolicySaver, Token: s.cfg.AdminToken, Profiling: s.cfg.Profiling,
		Gatherer: s.cfg.Gatherer, MaxBodyBytes: s.p.MaxBodyBytes(), BundleLimits: s.cfg.BundleLimits, Log: s.cfg.Logger,
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
		if err := s.listenersFailed(); err != nil {
			return err
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
	health := []func() error{s.listenersFailed} // a listener that stopped for good
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
