package lab

import (
	"context"
	"errors"
	"fmt"
	"net"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
)

// floorServer is Envoy's ext_authz Authorization service answering OK to
// every check: what the transport costs with no decision behind it.
type floorServer struct {
	authv3.UnimplementedAuthorizationServer
}

var okResponse = &authv3.CheckResponse{Status: &status.Status{Code: 0}}

func (floorServer) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return okResponse, nil
}

// ServeFloor serves the transport floor on l until ctx ends: a bare
// grpc-go ext_authz server (default options) that allows everything.
func ServeFloor(ctx context.Context, l net.Listener) error {
	s := grpc.NewServer()
	authv3.RegisterAuthorizationServer(s, floorServer{})
	go func() {
		<-ctx.Done()
		s.GracefulStop()
	}()
	if err := s.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("bench: floor: %w", err)
	}
	return nil
}
