// Command checkclient sends one Envoy-shaped ext_authz CheckRequest to a
// nexus server over gRPC and prints the decision, as Envoy would see it.
//
//	go run ./examples/checkclient -user bob -method GET -path /files/report.pdf
//
// By default the subject travels as Envoy's jwt_authn filter hands a
// verified JWT to ext_authz: the token's payload ({"sub": "bob"}) in the
// request's metadata under envoy.filters.http.jwt_authn. With -header it is
// the x-user request header instead, which nexus accepts only when started
// with --trusted-subject-header x-user.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9191", "nexus gRPC address")
	user := flag.String("user", "bob", "subject: the sub of a verified JWT")
	header := flag.Bool("header", false, "send the subject in the x-user header instead of a verified JWT's payload")
	method := flag.String("method", "GET", "HTTP method")
	path := flag.String("path", "/files/report.pdf", "HTTP path")
	flag.Parse()
	if err := run(*addr, *user, *method, *path, *header); err != nil {
		fmt.Fprintln(os.Stderr, "checkclient:", err)
		os.Exit(1)
	}
}

func run(addr, user, method, path string, inHeader bool) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	headers := map[string]string{":method": method, ":path": path, ":authority": "drive.example.com"}
	attrs := &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: method, Path: path, Host: "drive.example.com", Headers: headers,
		}},
	}
	if inHeader {
		headers["x-user"] = user
	} else {
		// What jwt_authn (payload_in_metadata: jwt_payload) and ext_authz
		// (metadata_context_namespaces) send for a token it verified.
		payload, err := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{"sub": user}})
		if err != nil {
			return err
		}
		attrs.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": payload}}
	}
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: attrs})
	if err != nil {
		return err
	}
	if ok := resp.GetOkResponse(); ok != nil {
		fmt.Printf("allowed")
		for _, h := range ok.GetHeaders() {
			fmt.Printf(" %s=%s", h.GetHeader().GetKey(), h.GetHeader().GetValue())
		}
		fmt.Println()
		return nil
	}
	d := resp.GetDeniedResponse()
	fmt.Printf("denied %d %s\n", d.GetStatus().GetCode(), d.GetBody())
	return nil
}
