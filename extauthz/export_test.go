package extauthz

import (
	"context"
	"net"
	"net/http"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/extauthz/internal/envoygrpc"
)

// CheckDirect runs the ext_authz Check handler without the transport, for
// benchmarks of the server-side cost.
func (s *Server) CheckDirect(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return (&envoygrpc.Server{PDP: s.p}).Check(ctx, req)
}

// HTTPHandler is the handler of the proxies' and applications' listener,
// for benchmarks of the server-side cost without the transport.
func (s *Server) HTTPHandler() http.Handler { return s.httpHandler() }

// WrapListeners makes the server wrap each bound listener with wrap, below
// its own guards (tests inject accept errors with it).
func WrapListeners(c *Config, wrap func(name string, l net.Listener) net.Listener) {
	c.wrapListener = wrap
}
