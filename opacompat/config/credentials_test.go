package config

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The tests below send real requests with each of OPA's credential kinds
// to local servers standing in for the remote (a bundle server, a token
// endpoint, a cloud metadata endpoint) and check what the remote sees.

// service parses one service "s" from cfg and returns it.
func service(t *testing.T, cfg map[string]any) *Service {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"s": cfg})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := ParseServices(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ss["s"]
}

// get sends GET path to s, through NewRequest and Do and again through
// OPA's REST client from Client (which shares the credentials and wraps
// the transport), and fails unless the remote answers 200 to both.
func get(t *testing.T, s *Service, path string) {
	t.Helper()
	req, err := s.NewRequest(context.Background(), http.MethodGet, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}

	var wrapped atomic.Int32
	c, err := s.Client(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			wrapped.Add(1)
			return next.RoundTrip(r)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err = c.Do(context.Background(), http.MethodGet, path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || wrapped.Load() != 1 {
		t.Fatalf("GET %s with OPA's client: %s, %d requests through the wrapper", path, resp.Status, wrapped.Load())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// remote answers 200 when the request's Authorization is want, 401
// otherwise.
func remote(t *testing.T, want string, tlsServer bool) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != want {
			t.Errorf("remote: Authorization %q, want %q", got, want)
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	var srv *httptest.Server
	if tlsServer {
		srv = httptest.NewTLSServer(h)
	} else {
		srv = httptest.NewServer(h)
	}
	t.Cleanup(srv.Close)
	return srv
}

// caFile writes srv's certificate as a PEM file, for tls.ca_cert.
func caFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCredentialsOAuth2ClientCredentials(t *testing.T) {
	var exchanges atomic.Int32
	tokens := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || !ok || id != "nexus" || secret != "s3cret" ||
			r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("scope") != "bundles:read" {
			t.Errorf("token endpoint: basic %q/%q, form %v", id, secret, r.PostForm)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		exchanges.Add(1)
		fmt.Fprint(w, `{"access_token": "exchanged-token", "token_type": "Bearer", "expires_in": 3600}`)
	}))
	defer tokens.Close()
	srv := remote(t, "Bearer exchanged-token", true)
	s := service(t, map[string]any{
		"url": srv.URL,
		"tls": map[string]any{"ca_cert": caFile(t, srv)}, // the same test certificate serves both
		"credentials": map[string]any{"oauth2": map[string]any{
			"token_url": tokens.URL + "/token", "client_id": "nexus", "client_secret": "s3cret", "scopes": []string{"bundles:read"},
		}},
	})
	get(t, s, "/bundles/authz.tar.gz")
	get(t, s, "/bundles/authz.tar.gz")
	if n := exchanges.Load(); n != 1 {
		t.Fatalf("%d token exchanges for four requests, want 1 (the token is cached until it expires, and OPA's client shares it)", n)
	}
}

var sigV4 = regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/s3/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$`)

// verifySigV4 recomputes the request's AWS Signature Version 4 as S3
// does, from the secret key, and reports why it does not validate.
func verifySigV4(r *http.Request, secret string) error {
	m := sigV4.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil {
		return fmt.Errorf("authorization %q is not SigV4 for s3", r.Header.Get("Authorization"))
	}
	date, region, signed, sig := m[2], m[3], strings.Split(m[4], ";"), m[5]
	amzDate := r.Header.Get("X-Amz-Date")
	if !strings.HasPrefix(amzDate, date) {
		return fmt.Errorf("x-amz-date %q does not match the credential's date %s", amzDate, date)
	}
	for _, must := range []string{"host", "x-amz-date", "x-amz-content-sha256"} {
		if !strings.Contains(";"+m[4]+";", ";"+must+";") {
			return fmt.Errorf("%s is not signed (%s)", must, m[4])
		}
	}
	if !sort.StringsAreSorted(signed) {
		return fmt.Errorf("signed headers %v are not sorted", signed)
	}
	var canon strings.Builder
	fmt.Fprintf(&canon, "%s\n%s\n%s\n", r.Method, r.URL.EscapedPath(), r.URL.RawQuery)
	for _, h := range signed {
		v := strings.Join(r.Header.Values(h), ",")
		if h == "host" {
			v = r.Host
		}
		fmt.Fprintf(&canon, "%s:%s\n", h, v)
	}
	empty := sha256.Sum256(nil)
	if got := r.Header.Get("X-Amz-Content-Sha256"); got != hex.EncodeToString(empty[:]) {
		return fmt.Errorf("x-amz-content-sha256 %q is not the empty body's hash", got)
	}
	fmt.Fprintf(&canon, "\n%s\n%s", m[4], r.Header.Get("X-Amz-Content-Sha256"))
	ch := sha256.Sum256([]byte(canon.String()))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + date + "/" + region + "/s3/aws4_request\n" + hex.EncodeToString(ch[:])
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	key := mac(mac(mac(mac([]byte("AWS4"+secret), date), region), "s3"), "aws4_request")
	if want := hex.EncodeToString(mac(key, toSign)); !hmac.Equal([]byte(want), []byte(sig)) {
		return fmt.Errorf("signature %s does not validate (want %s)", sig, want)
	}
	return nil
}

func TestCredentialsS3Signing(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_REGION", "eu-west-3")
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") ||
			!strings.Contains(r.Header.Get("Authorization"), "/eu-west-3/s3/aws4_request") {
			t.Errorf("authorization %q", r.Header.Get("Authorization"))
		}
		if err := verifySigV4(r, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"); err != nil {
			t.Error(err)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		// A signature made with another secret must not validate: the
		// check above is not vacuous.
		if verifySigV4(r, "another-secret") == nil {
			t.Error("the signature validates with a wrong secret")
		}
	}))
	defer srv.Close()
	s := service(t, map[string]any{
		"url":         srv.URL + "/my-bucket",
		"headers":     map[string]string{"X-Tenant": "t1"},
		"credentials": map[string]any{"s3_signing": map[string]any{"environment_credentials": map[string]any{}}},
	})
	get(t, s, "/bundles/authz.tar.gz")
	if n := seen.Load(); n != 2 {
		t.Fatalf("the remote saw %d requests, want 2 (the service's and OPA's client's)", n)
	}
}

// writeCert writes a PEM certificate and key signed by parent (self
// signed when parent is nil) and returns them with the paths.
func writeCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cp, kp := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(cp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key, cp, kp
}

func TestCredentialsClientTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, _, _ := writeCert(t, dir, "client-ca", nil, nil)
	_, _, cert, key := writeCert(t, dir, "nexus-replica", ca, caKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "nexus-replica" {
			t.Errorf("client certificate: %v", r.TLS.PeerCertificates)
		}
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()
	s := service(t, map[string]any{
		"url":         srv.URL,
		"tls":         map[string]any{"ca_cert": caFile(t, srv)},
		"credentials": map[string]any{"client_tls": map[string]any{"cert": cert, "private_key": key}},
	})
	get(t, s, "/bundles/authz.tar.gz")

	// Without the certificate the remote refuses the handshake: the
	// server above really checks it.
	plain := service(t, map[string]any{"url": srv.URL, "tls": map[string]any{"ca_cert": caFile(t, srv)}})
	req, err := plain.NewRequest(context.Background(), http.MethodGet, "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := plain.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("a request without a client certificate was answered")
	}
}

func TestCredentialsGCPMetadata(t *testing.T) {
	metadata := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata-Flavor") != "Google" || r.URL.Path != "/computeMetadata/v1/instance/service-accounts/default/token" ||
			r.URL.Query().Get("scopes") != "https://www.googleapis.com/auth/devstorage.read_only" {
			t.Errorf("metadata request %s %v", r.URL, r.Header)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `{"access_token": "gcp-token", "expires_in": 3599, "token_type": "Bearer"}`)
	}))
	defer metadata.Close()
	srv := remote(t, "Bearer gcp-token", false)
	s := service(t, map[string]any{
		"url": srv.URL,
		"credentials": map[string]any{"gcp_metadata": map[string]any{
			"endpoint": metadata.URL, "scopes": []string{"https://www.googleapis.com/auth/devstorage.read_only"},
		}},
	})
	get(t, s, "/b/bundles/o/authz.tar.gz")
}

func TestCredentialsAzureManagedIdentity(t *testing.T) {
	t.Setenv("IDENTITY_ENDPOINT", "") // not App Service: the IMDS flavour
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Header.Get("Metadata") != "true" || r.URL.Path != "/metadata/identity/oauth2/token" ||
			q.Get("resource") != "https://storage.azure.com/" || q.Get("client_id") != "replica-identity" || q.Get("api-version") == "" {
			t.Errorf("IMDS request %s %v", r.URL, r.Header)
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error": "invalid_request", "error_description": "bad"}`)
			return
		}
		fmt.Fprint(w, `{"access_token": "azure-token", "expires_in": "3599", "token_type": "Bearer"}`)
	}))
	defer imds.Close()
	srv := remote(t, "Bearer azure-token", false)
	s := service(t, map[string]any{
		"url": srv.URL,
		"credentials": map[string]any{"azure_managed_identity": map[string]any{
			"endpoint": imds.URL + "/metadata/identity/oauth2/token", "resource": "https://storage.azure.com/", "client_id": "replica-identity",
		}},
	})
	get(t, s, "/bundles/authz.tar.gz")
}

// TestCredentialsFailure checks that a token that cannot be had fails
// the request with the service's name, before anything is sent.
func TestCredentialsFailure(t *testing.T) {
	metadata := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}))
	defer metadata.Close()
	var sent atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer srv.Close()
	s := service(t, map[string]any{
		"url":         srv.URL,
		"credentials": map[string]any{"gcp_metadata": map[string]any{"endpoint": metadata.URL, "audience": "bundles"}},
	})
	_, err := s.NewRequest(context.Background(), http.MethodGet, "/", nil)
	if err == nil || !strings.Contains(err.Error(), "service s: credentials:") {
		t.Fatalf("got %v, want a credentials error naming the service", err)
	}
	if sent.Load() != 0 {
		t.Fatal("a request went out without its credentials")
	}
}
