// Command checkclient sends one Envoy-shaped ext_authz CheckRequest to a
// nexus server over gRPC and prints the decision, as Envoy would see it.
//
//	go run ./examples/checkclient -user bob -method GET -path /files/report.pdf
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9191", "nexus gRPC address")
	user := flag.String("user", "bob", "subject (the x-user header)")
	method := flag.String("method", "GET", "HTTP method")
	path := flag.String("path", "/files/report.pdf", "HTTP path")
	flag.Parse()
	if err := run(*addr, *user, *method, *path); err != nil {
		fmt.Fprintln(os.Stderr, "checkclient:", err)
		os.Exit(1)
	}
}

func run(addr, user, method, path string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: method, Path: path, Host: "drive.example.com",
			Headers: map[string]string{":method": method, ":path": path, ":authority": "drive.example.com", "x-user": user},
		}},
	}})
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
