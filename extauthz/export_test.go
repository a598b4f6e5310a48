package extauthz

import (
	"context"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/extauthz/internal/input"
	"github.com/nexuspdp/nexus/extauthz/internal/prune"
)

// CheckDirect runs the ext_authz Check handler without the transport, for
// benchmarks of the server-side cost.
func (s *Server) CheckDirect(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return (&authServer{p: s.p}).Check(ctx, req)
}

// CheckReloadingOnce decides req over ext_authz's path, reloading the
// policy after the input is first built, as a policy load racing a
// decision would: it reports the decision and how often the input was
// built.
func (s *Server) CheckReloadingOnce(ctx context.Context, req *authv3.CheckRequest) (allowed bool, builds int, err error) {
	d, err := s.p.decideBuilt(ctx, ifaceGRPC, s.p.cfg.EnvoyEntrypoint, meta{}, func(dst []byte, keep *prune.Tree) ([]byte, error) {
		builds++
		out, err := input.AppendEnvoy(dst, req, input.Options{Keep: keep})
		if builds == 1 && err == nil {
			err = s.Reload(ctx)
		}
		return out, err
	})
	return d.Allowed, builds, err
}

// PolicyData is the data the server loads a policy with: data plus the
// schema's roles and permissions, the route rules' split paths and their
// index.
func PolicyData(data []byte, sc *datastore.Schema) ([]byte, error) {
	d, _, err := withSchema(data, sc)
	return d, err
}
