package main

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
)

// TestRunOPAEnableReflection: plugins.envoy_ext_authz_grpc.enable-reflection
// in an OPA configuration read by nexus run registers gRPC server
// reflection on the ext_authz listener, so that grpcurl and the like list
// envoy.service.auth.v3.Authorization and fetch its descriptor; without
// it (the default) the reflection service is not there and a client gets
// UNIMPLEMENTED. Both go over real gRPC on loopback.
func TestRunOPAEnableReflection(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setting string // the enable-reflection line, "" for none
		want    bool
	}{
		{name: "enabled", setting: "    enable-reflection: true\n", want: true},
		{name: "default", want: false},
		{name: "disabled", setting: "    enable-reflection: false\n", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			policy := writeFile(t, dir, "policy.rego", quickStartPolicy)
			config := writeFile(t, dir, "config.yaml", "plugins:\n  envoy_ext_authz_grpc:\n    addr: 127.0.0.1:0\n    path: envoy/authz/allow\n"+tc.setting+
				"nexus:\n  data_dir: "+strconv.Quote(filepath.Join(dir, "data"))+"\n")
			p := startNexus(t, "run", "--server", "--config-file="+config, "--addr=127.0.0.1:0", policy)
			addr := p.addrs["grpc"]
			if addr == "" {
				t.Fatalf("no gRPC listener:\n%s", p.log.String())
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })

			// The server answers checks either way.
			resp, err := authv3.NewAuthorizationClient(conn).Check(context.Background(), check("GET", "/people", ""))
			if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
				t.Fatalf("check: %v, %v", resp, err)
			}

			services, err := listServices(t, conn)
			if !tc.want {
				if status.Code(err) != codes.Unimplemented {
					t.Fatalf("reflection without enable-reflection: services %v, err %v; want UNIMPLEMENTED", services, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("listing services: %v", err)
			}
			want := authv3.Authorization_ServiceDesc.ServiceName
			if want != "envoy.service.auth.v3.Authorization" || !slices.Contains(services, want) {
				t.Fatalf("services %v, want %s among them", services, want)
			}
			fd := fileContainingSymbol(t, conn, want)
			if fd.GetPackage() != "envoy.service.auth.v3" ||
				!slices.ContainsFunc(fd.GetService(), func(s *descriptorpb.ServiceDescriptorProto) bool { return s.GetName() == "Authorization" }) {
				t.Fatalf("the file containing %s is %s (package %s), without the service", want, fd.GetName(), fd.GetPackage())
			}
		})
	}
}

// listServices asks the server's reflection service (grpc.reflection.v1)
// for the services it serves.
func listServices(t *testing.T, conn *grpc.ClientConn) ([]string, error) {
	t.Helper()
	resp, err := askReflection(t, conn, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	})
	if err != nil {
		return nil, err
	}
	if e := resp.GetErrorResponse(); e != nil {
		t.Fatalf("list_services: error %d %s", e.GetErrorCode(), e.GetErrorMessage())
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// fileContainingSymbol fetches, by reflection, the file descriptor that
// defines symbol.
func fileContainingSymbol(t *testing.T, conn *grpc.ClientConn, symbol string) *descriptorpb.FileDescriptorProto {
	t.Helper()
	resp, err := askReflection(t, conn, &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
	})
	if err != nil {
		t.Fatalf("file_containing_symbol %s: %v", symbol, err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		t.Fatalf("file_containing_symbol %s: error %d %s", symbol, e.GetErrorCode(), e.GetErrorMessage())
	}
	files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
	if len(files) == 0 {
		t.Fatalf("file_containing_symbol %s: no file", symbol)
	}
	// The first file is the one that defines the symbol; the others are
	// its dependencies.
	fd := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(files[0], fd); err != nil {
		t.Fatalf("decoding the file descriptor: %v", err)
	}
	return fd
}

// askReflection sends one request on a ServerReflectionInfo stream and returns
// the answer.
func askReflection(t *testing.T, conn *grpc.ClientConn, req *reflectionpb.ServerReflectionRequest) (*reflectionpb.ServerReflectionResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(req); err != nil {
		// A failed send is reported by Recv with the stream's status.
		_, err = stream.Recv()
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	_ = stream.CloseSend()
	return resp, nil
}
