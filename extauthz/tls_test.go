package extauthz_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
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
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nexus test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvDER, srvKey := issue(2, "nexus", x509.ExtKeyUsageServerAuth)
	srvKeyDER, _ := x509.MarshalECPrivateKey(srvKey)
	cliDER, cliKey := issue(3, "envoy", x509.ExtKeyUsageClientAuth)
	pki := testPKI{
		caFile:   write("ca.pem", "CERTIFICATE", caDER),
		certFile: write("server.pem", "CERTIFICATE", srvDER),
		keyFile:  write("server-key.pem", "EC PRIVATE KEY", srvKeyDER),
		pool:     x509.NewCertPool(),
		client:   tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey},
	}
	pki.pool.AddCert(ca)
	return pki
}

func TestMTLS(t *testing.T) {
	pki := newPKI(t)
	mtls := extauthz.TLS{CertFile: pki.certFile, KeyFile: pki.keyFile, ClientCAFile: pki.caFile}
	ts := newTestServer(t, func(c *extauthz.Config) { c.GRPCTLS, c.HTTPTLS = mtls, mtls })

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
		{"no-engine", func(c *extauthz.Config) { c.Engine = nil }, "Engine is required"},
		{"half-tls", func(c *extauthz.Config) { c.GRPCTLS = extauthz.TLS{CertFile: "x"} }, "both a certificate and a key"},
		{"negative-body", func(c *extauthz.Config) { c.MaxBodyBytes = -1 }, "MaxBodyBytes -1 is negative"},
		{"negative-cache", func(c *extauthz.Config) { c.CacheSize = -5 }, "CacheSize -5 is negative"},
		{"admin-without-token", func(c *extauthz.Config) { c.AdminInsecure = false }, "admin listener needs an AdminToken"},
		{"app-without-key", func(c *extauthz.Config) { c.AppAPIInsecure = false }, "application endpoints need an AppAPIKey"},
		{"app-key-is-admin-token", func(c *extauthz.Config) { c.AdminToken, c.AppAPIKey = "same", "same" }, "may not be the admin token"},
		{"public-url-query", func(c *extauthz.Config) { c.PublicURL = "https://pdp.example.com/?x=1" }, "without a query"},
		{"public-url-relative", func(c *extauthz.Config) { c.PublicURL = "pdp.example.com" }, "must be an http or https URL"},
	}
	base := newTestServer(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := fixture.DefaultBundle()
			if err != nil {
				t.Fatal(err)
			}
			eng, err := engine.New(context.Background(), engine.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eng.Close(context.Background()) })
			cfg := extauthz.Config{Engine: eng, Store: base.store, Policy: b, AdminInsecure: true, AppAPIInsecure: true}
			tt.mutate(&cfg)
			err = cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
