package config

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultResponseHeaderTimeout is how long a service may take to send
// response headers when the configuration does not say (OPA's default).
const DefaultResponseHeaderTimeout = 10 * time.Second

// Service is one entry of the configuration's services: a base URL, the
// headers and credentials every request to it carries, and an HTTP client
// with its TLS settings.
type Service struct {
	// Name is the service's name, which bundles, decision_logs and
	// status refer to.
	Name string
	// URL is the base URL, without a trailing slash.
	URL string

	headers   map[string]string
	token     string
	tokenPath string
	scheme    string
	client    *http.Client

	waitOnce   sync.Once
	waitClient *http.Client
}

var (
	serviceKeys     = []string{"name", "url", "headers", "allow_insecure_tls", "response_header_timeout_seconds", "tls", "credentials", "type"}
	credentialKeys  = []string{"bearer", "client_tls"}
	credentialNever = []string{"oauth2", "s3_signing", "gcp_metadata", "azure_managed_identity", "plugin"}
)

// ParseServices reads the services section: either an object of name to
// service, or a list of services each with a name (OPA accepts both).
func ParseServices(raw json.RawMessage) (map[string]*Service, error) {
	out := map[string]*Service{}
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	entries := map[string]json.RawMessage{}
	if raw[0] == '[' {
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("services: %w", err)
		}
		for i, r := range list {
			var named struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(r, &named); err != nil {
				return nil, fmt.Errorf("services[%d]: %w", i, err)
			}
			if named.Name == "" {
				return nil, fmt.Errorf("services[%d]: a service in a list needs a name", i)
			}
			if _, dup := entries[named.Name]; dup {
				return nil, fmt.Errorf("services: %q is named twice", named.Name)
			}
			entries[named.Name] = r
		}
	} else if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("services: want an object or a list: %w", err)
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s, err := parseService("services."+n, n, entries[n])
		if err != nil {
			return nil, err
		}
		out[n] = s
	}
	return out, nil
}

func parseService(where, name string, raw json.RawMessage) (*Service, error) {
	m, err := Object(where, raw, serviceKeys)
	if err != nil {
		return nil, err
	}
	var (
		u        string
		typ      string
		insecure bool
		timeout  *int64
		headers  map[string]string
	)
	for key, dst := range map[string]any{"url": &u, "type": &typ, "allow_insecure_tls": &insecure, "response_header_timeout_seconds": &timeout, "headers": &headers} {
		if err := Decode(where, m, key, dst); err != nil {
			return nil, err
		}
	}
	if typ != "" {
		return nil, fmt.Errorf("%s.type %q: %w (nexus reads bundles over HTTP from a bundle server)", where, typ, ErrUnsupported)
	}
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("%s.url: want an http or https URL, got %q", where, u)
	}
	for k, v := range headers {
		if k == "" || strings.ContainsAny(k, "\r\n: ") || strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("%s.headers: %q is not a valid header", where, k)
		}
	}
	s := &Service{Name: name, URL: strings.TrimRight(u, "/"), headers: headers, scheme: "Bearer"}

	tlsc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // only when the configuration asks, as OPA allows
	if err := s.credentials(where, m, tlsc); err != nil {
		return nil, err
	}
	if err := serverTLS(where, m, tlsc); err != nil {
		return nil, err
	}
	rht := DefaultResponseHeaderTimeout
	if timeout != nil {
		if *timeout < 0 {
			return nil, fmt.Errorf("%s.response_header_timeout_seconds: must not be negative", where)
		}
		rht = time.Duration(*timeout) * time.Second // 0: no timeout, as in OPA
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsc
	tr.ResponseHeaderTimeout = rht
	s.client = &http.Client{Transport: tr}
	return s, nil
}

func (s *Service) credentials(where string, m map[string]json.RawMessage, tlsc *tls.Config) error {
	where += ".credentials"
	cm, err := Object(where, m["credentials"], credentialKeys, credentialNever...)
	if err != nil {
		return err
	}
	if len(cm) > 1 {
		return fmt.Errorf("%s: give one kind of credentials", where)
	}
	if raw, ok := cm["bearer"]; ok {
		bm, err := Object(where+".bearer", raw, []string{"token", "token_path", "scheme"})
		if err != nil {
			return err
		}
		for key, dst := range map[string]*string{"token": &s.token, "token_path": &s.tokenPath, "scheme": &s.scheme} {
			if err := Decode(where+".bearer", bm, key, dst); err != nil {
				return err
			}
		}
		if s.scheme == "" {
			s.scheme = "Bearer"
		}
		if s.tokenPath != "" {
			if _, err := s.bearerToken(); err != nil {
				return fmt.Errorf("%s.bearer.token_path: %w", where, err)
			}
		}
	}
	if raw, ok := cm["client_tls"]; ok {
		cm, err := Object(where+".client_tls", raw, []string{"cert", "private_key", "ca_cert", "system_ca_required"}, "private_key_passphrase", "cert_reread_interval_seconds")
		if err != nil {
			return err
		}
		var cert, key string
		for k, dst := range map[string]*string{"cert": &cert, "private_key": &key} {
			if err := Decode(where+".client_tls", cm, k, dst); err != nil {
				return err
			}
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("%s.client_tls: %w", where, err)
		}
		tlsc.Certificates = []tls.Certificate{pair}
		// The CA settings here are OPA's older spelling of the service's tls.
		return serverTLS(where+".client_tls", cm, tlsc)
	}
	return nil
}

// serverTLS reads tls.ca_cert and tls.system_ca_required (or, for
// client_tls, the same keys at its own level).
func serverTLS(where string, m map[string]json.RawMessage, tlsc *tls.Config) error {
	tm := m
	if raw, ok := m["tls"]; ok {
		where += ".tls"
		var err error
		if tm, err = Object(where, raw, []string{"ca_cert", "system_ca_required"}); err != nil {
			return err
		}
	} else if _, ok := m["ca_cert"]; !ok {
		return nil
	}
	var ca string
	var system bool
	if err := Decode(where, tm, "ca_cert", &ca); err != nil {
		return err
	}
	if err := Decode(where, tm, "system_ca_required", &system); err != nil {
		return err
	}
	if ca == "" {
		return nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return fmt.Errorf("%s.ca_cert: %w", where, err)
	}
	pool := x509.NewCertPool()
	if system {
		if sys, err := x509.SystemCertPool(); err == nil {
			pool = sys
		}
	}
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s.ca_cert: %s holds no PEM certificate", where, ca)
	}
	tlsc.RootCAs = pool
	return nil
}

// bearerToken is the configured token, read from token_path on every
// request when one is given (so a rotated token is picked up).
func (s *Service) bearerToken() (string, error) {
	if s.tokenPath == "" {
		return s.token, nil
	}
	b, err := os.ReadFile(s.tokenPath)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if strings.ContainsAny(t, "\r\n") {
		return "", fmt.Errorf("%s holds more than one line", s.tokenPath)
	}
	return t, nil
}

// NewRequest builds a request to the service's URL joined with path,
// with the service's headers and credentials.
func (s *Service) NewRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL+"/"+strings.TrimLeft(path, "/"), body)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	if s.token != "" || s.tokenPath != "" {
		t, err := s.bearerToken()
		if err != nil {
			return nil, fmt.Errorf("service %s: bearer token: %w", s.Name, err)
		}
		req.Header.Set("Authorization", s.scheme+" "+t)
	}
	return req, nil
}

// Do sends a request built by NewRequest.
func (s *Service) Do(req *http.Request) (*http.Response, error) {
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	return resp, nil
}

// DoWait sends a request built by NewRequest without the response header
// timeout, for long polls: the server holds such a request until it has
// something new, and the caller bounds the wait with the request's
// context (OPA lifts the timeout for long polls the same way).
func (s *Service) DoWait(req *http.Request) (*http.Response, error) {
	s.waitOnce.Do(func() {
		tr := s.client.Transport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 0
		s.waitClient = &http.Client{Transport: tr}
	})
	resp, err := s.waitClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	return resp, nil
}

// Lookup returns the named service, or the only one when name is empty
// (OPA's rule when a section names no service). where names the setting
// that refers to it.
func Lookup(services map[string]*Service, where, name string) (*Service, error) {
	if name == "" {
		if len(services) == 1 {
			for _, s := range services {
				return s, nil
			}
		}
		return nil, fmt.Errorf("%s: name a service (%d are configured)", where, len(services))
	}
	s, ok := services[name]
	if !ok {
		return nil, fmt.Errorf("%s: no service named %q", where, name)
	}
	return s, nil
}
