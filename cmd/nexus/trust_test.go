package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"
)

func TestServeResolve(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyFile := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NEXUS_ADMIN_TOKEN", "")
	generated := "(generated)"
	tests := []struct {
		name      string
		in        serveConfig
		wantErr   string // substring; "" means no error
		wantToken string // generated: a new token in the data directory
		wantHdr   string
	}{
		{name: "loopback admin gets a generated token", in: serveConfig{Server: extauthz.Config{AdminAddr: "127.0.0.1:8282"}}, wantToken: generated},
		{name: "localhost admin gets a generated token", in: serveConfig{Server: extauthz.Config{AdminAddr: "localhost:8282"}}, wantToken: generated},
		{name: "IPv6 loopback admin gets a generated token", in: serveConfig{Server: extauthz.Config{AdminAddr: "[::1]:8282"}}, wantToken: generated},
		{name: "admin disabled", in: serveConfig{Server: extauthz.Config{AdminAddr: "-"}}},
		{name: "every address without a token", in: serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282"}}, wantErr: "not on loopback"},
		{name: "empty host without a token", in: serveConfig{Server: extauthz.Config{AdminAddr: ":8282"}}, wantErr: "not on loopback"},
		{name: "pod address without a token", in: serveConfig{Server: extauthz.Config{AdminAddr: "10.0.0.7:8282"}}, wantErr: "not on loopback"},
		{name: "every address, insecure", in: serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282", AdminInsecure: true}}},
		{name: "every address with a token", in: serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282", AdminToken: "t"}}, wantToken: "t"},
		{name: "token from a file", in: serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282"}, AdminTokenFile: tokenFile}, wantToken: "s3cret"},
		{name: "empty token file", in: serveConfig{Server: extauthz.Config{AdminAddr: "0.0.0.0:8282"}, AdminTokenFile: emptyFile}, wantErr: "is empty"},
		{name: "missing token file", in: serveConfig{Server: extauthz.Config{AdminAddr: "127.0.0.1:8282"}, AdminTokenFile: filepath.Join(dir, "nope")}, wantErr: "no such file"},
		{name: "token twice", in: serveConfig{Server: extauthz.Config{AdminToken: "a"}, AdminTokenFile: tokenFile}, wantErr: "not both"},
		{name: "header name lower-cased", in: serveConfig{Server: extauthz.Config{AdminAddr: "-"}, TrustedSubjectHeader: "X-User"}, wantHdr: "x-user"},
		{name: "not a header name", in: serveConfig{TrustedSubjectHeader: "x user"}, wantErr: "not a header name"},
		{name: "pseudo-header", in: serveConfig{TrustedSubjectHeader: ":authority"}, wantErr: "not a header name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in
			c.DataDir = t.TempDir()
			err := c.resolve()
			var token string
			if err == nil {
				token, _, err = adminToken(c, slog.New(slog.DiscardHandler))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantToken == generated {
				if len(token) != 64 {
					t.Fatalf("token %q, want a generated one", token)
				}
			} else if token != tt.wantToken {
				t.Fatalf("token %q, want %q", token, tt.wantToken)
			}
			if c.TrustedSubjectHeader != tt.wantHdr {
				t.Fatalf("header %q, want %q", c.TrustedSubjectHeader, tt.wantHdr)
			}
		})
	}
}

// TestTrustedSubjectHeader runs the default policy as serve builds it, with
// and without --trusted-subject-header, on Envoy-shaped CheckRequests: a
// client's own x-user header never names the subject unless the flag says a
// trusted hop sets it, and a verified JWT (jwt_authn's payload in the
// request's metadata) always wins over the header.
func TestTrustedSubjectHeader(t *testing.T) {
	tests := []struct {
		name     string
		trusted  string
		method   string
		path     string
		header   string // x-user
		jwtSub   string // sub of the verified JWT
		wantCode codes.Code
		wantHTTP int32  // status of a deny
		wantSubj string // x-nexus-subject of an allow
	}{
		{name: "forged header, nothing trusted", method: "DELETE", path: "/tenants/acme/folders/q3", header: "alice", wantCode: codes.PermissionDenied, wantHTTP: 401},
		{name: "forged header for a reader, nothing trusted", method: "GET", path: "/files/report.pdf", header: "bob", wantCode: codes.PermissionDenied, wantHTTP: 401},
		{name: "JWT alone", method: "GET", path: "/files/report.pdf", jwtSub: "bob", wantCode: codes.OK, wantSubj: "bob"},
		{name: "JWT beats a forged header", method: "DELETE", path: "/tenants/acme/folders/q3", header: "alice", jwtSub: "carol", wantCode: codes.PermissionDenied, wantHTTP: 403},
		{name: "trusted header", trusted: "x-user", method: "DELETE", path: "/tenants/acme/folders/q3", header: "alice", wantCode: codes.OK, wantSubj: "alice"},
		{name: "JWT beats a trusted header", trusted: "x-user", method: "DELETE", path: "/tenants/acme/folders/q3", header: "alice", jwtSub: "carol", wantCode: codes.PermissionDenied, wantHTTP: 403},
		{name: "JWT subject decides an allow", trusted: "x-user", method: "GET", path: "/files/report.pdf", header: "carol", jwtSub: "bob", wantCode: codes.OK, wantSubj: "bob"},
		{name: "another header is not trusted", trusted: "x-verified-user", method: "GET", path: "/files/report.pdf", header: "bob", wantCode: codes.PermissionDenied, wantHTTP: 401},
	}
	clients := map[string]authv3.AuthorizationClient{}
	for _, tt := range tests {
		if _, ok := clients[tt.trusted]; !ok {
			clients[tt.trusted] = startDefaultServer(t, tt.trusted)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := clients[tt.trusted]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := client.Check(ctx, envoyCheck(t, tt.method, tt.path, tt.header, tt.jwtSub))
			if err != nil {
				t.Fatal(err)
			}
			if got := codes.Code(resp.GetStatus().GetCode()); got != tt.wantCode {
				t.Fatalf("status %v, want %v (%v)", got, tt.wantCode, resp)
			}
			if tt.wantHTTP != 0 {
				d := resp.GetDeniedResponse()
				if got := int32(d.GetStatus().GetCode()); got != tt.wantHTTP {
					t.Fatalf("denied with HTTP %d, want %d (%v)", got, tt.wantHTTP, resp)
				}
				if tt.wantHTTP == 401 && !strings.HasPrefix(headerOf(d.GetHeaders(), "www-authenticate"), "Bearer") {
					t.Fatalf("401 without a Bearer WWW-Authenticate: %v", d.GetHeaders())
				}
			}
			if tt.wantSubj != "" {
				if got := headerOf(resp.GetOkResponse().GetHeaders(), "x-nexus-subject"); got != tt.wantSubj {
					t.Fatalf("x-nexus-subject %q, want %q", got, tt.wantSubj)
				}
			}
		})
	}
}

// startDefaultServer serves the embedded default policy and demo data the
// way runServe composes them, on loopback gRPC, and returns a client.
func startDefaultServer(t *testing.T, trusted string) authv3.AuthorizationClient {
	t.Helper()
	ctx := context.Background()
	c := serveConfig{Core: pdp.Config{EnvoyEntrypoint: pdp.DefaultEnvoyEntrypoint, AuthzEntrypoint: pdp.DefaultAuthzEntrypoint, EvalTimeout: 5 * time.Second}, DataDir: t.TempDir(), TrustedSubjectHeader: trusted}
	if err := c.resolve(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := openStore(ctx, c, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	eng, err := builtins.NewEngine(ctx, store, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(ctx) })
	b, err := loadPolicy(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = trustSubjectHeader(b, c.TrustedSubjectHeader); err != nil {
		t.Fatal(err)
	}
	p, err := pdp.New(ctx, c.core(eng, store, b, nil, log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	srv, err := extauthz.New(extauthz.Config{PDP: p, Store: store, GRPCAddr: "127.0.0.1:0", HTTPAddr: "-", AdminAddr: "-"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	conn, err := grpc.NewClient(srv.Addr("grpc").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// envoyCheck is a CheckRequest as Envoy sends it after jwt_authn (with
// payload_in_metadata) and ext_authz's metadata_context_namespaces:
// the verified payload sits in the metadata context, any header the client
// sent sits in the headers.
func envoyCheck(t *testing.T, method, path, user, jwtSub string) *authv3.CheckRequest {
	t.Helper()
	h := map[string]string{
		":authority": "drive.example.com", ":method": method, ":path": path, ":scheme": "https",
		"x-request-id": "5b1d0c1e-8c1f-4a6e-9d3a-1f2e3d4c5b6a", "user-agent": "curl/8.0",
	}
	if user != "" {
		h["x-user"] = user
	}
	a := &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "10.1.2.3", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: "1", Method: method, Path: path, Host: "drive.example.com", Scheme: "https", Protocol: "HTTP/2", Headers: h,
		}},
	}
	if jwtSub != "" {
		payload, err := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{
			"iss": "https://nexus.example/demo", "aud": "nexus-demo", "sub": jwtSub, "exp": 4102444800,
		}})
		if err != nil {
			t.Fatal(err)
		}
		a.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.jwt_authn": payload}}
	}
	return &authv3.CheckRequest{Attributes: a}
}

func headerOf(hs []*corev3.HeaderValueOption, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.GetHeader().GetKey(), name) {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}
