package extauthz_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/internal/natstest"
)

type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	client                    tls.Certificate
}

// newPKI makes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA.
func newPKI(t *testing.T) testPKI {
	t.Helper()
	ca, err := natstest.NewPKI("nexus test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue("nexus", false, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Issue("envoy", true)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ca.WriteFiles(t.TempDir(), map[string]natstest.Cert{"server": srv})
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "server.pem"),
		keyFile:  filepath.Join(dir, "server-key.pem"),
		pool:     ca.Pool(),
		client:   cli.TLS,
	}
}

func TestMTLS(t *testing.T) {
	pki := newPKI(t)
	mtls := extauthz.TLS{CertFile: pki.certFile, KeyFile: pki.keyFile, ClientCAFile: pki.caFile}
	ts := newTestServer(t, func(c *testConfig) { c.GRPCTLS, c.HTTPTLS = mtls, mtls })

	dial := func(certs []tls.Certificate) error {
		creds := credentials.NewTLS(&tls.Config{RootCAs: pki.pool, Certificates: certs})
		conn, err := grpc.NewClient(ts.srv.Addr("grpc").String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"}))
		if err == nil && resp.GetStatus().GetCode() != 0 {
			t.Fatalf("bob denied over mTLS: %v", resp)
		}
		return err
	}
	if err := dial([]tls.Certificate{pki.client}); err != nil {
		t.Fatalf("gRPC with a client certificate: %v", err)
	}
	if err := dial(nil); err == nil {
		t.Fatal("gRPC without a client certificate was accepted")
	}

	url := "https://" + ts.srv.Addr("http").String() + "/allowed"
	body := `{"user":"bob","action":"read","resource":"file:report.pdf"}`
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}}}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testAppKey)
	resp, err := withCert.Do(req)
	if err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTPS status %d", resp.StatusCode)
	}
	withCert.CloseIdleConnections()
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	if resp, err := noCert.Post(url, "application/json", strings.NewReader(body)); err == nil {
		resp.Body.Close()
		t.Fatal("HTTPS without a client certificate was accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*extauthz.Config)
		wantErr string
	}{
		{"no-pdp", func(c *extauthz.Config) { c.PDP = nil }, "PDP is required"},
		{"no-store", func(c *extauthz.Config) { c.Store = nil }, "Store is required"},
		{"half-tls", func(c *extauthz.Config) { c.GRPCTLS = extauthz.TLS{CertFile: "x"} }, "both a certificate and a key"},
		{"admin-without-token", func(c *extauthz.Config) { c.AdminInsecure = false }, "admin listener needs an AdminToken"},
		{"app-without-key", func(c *extauthz.Config) { c.AppAPIInsecure = false }, "application endpoints need an AppAPIKey"},
		{"short-admin-token", func(c *extauthz.Config) { c.AdminToken = "x" }, "the AdminToken (--admin-token) is 1 bytes; a bearer secret needs at least 16"},
		{"admin-token-of-15", func(c *extauthz.Config) { c.AdminToken = "0123456789abcde" }, "needs at least 16"},
		{"short-app-key", func(c *extauthz.Config) { c.AppAPIKey = "k" }, "the AppAPIKey (--app-api-key) is 1 bytes"},
		{"app-key-is-admin-token", func(c *extauthz.Config) {
			c.AdminToken, c.AppAPIKey = "same-secret-0123456789", "same-secret-0123456789"
		}, "may not be the admin token"},
		{"public-url-query", func(c *extauthz.Config) { c.PublicURL = "https://pdp.example.com/?x=1" }, "without a query"},
		{"public-url-relative", func(c *extauthz.Config) { c.PublicURL = "pdp.example.com" }, "must be an http or https URL"},
		{"negative-batch", func(c *extauthz.Config) { c.MaxBatch = -1 }, "MaxBatch -1 is negative"},
	}
	base := newTestServer(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := extauthz.Config{PDP: base.pdp, Store: base.store, AdminInsecure: true, AppAPIInsecure: true}
			tt.mutate(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
