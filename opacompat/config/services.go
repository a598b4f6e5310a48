package config

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins/rest"
)

// DefaultResponseHeaderTimeout is how long a service may take to send
// response headers when the configuration does not say (OPA's default).
const DefaultResponseHeaderTimeout = 10 * time.Second

// Service is one entry of the configuration's services: a base URL, the
// headers and credentials every request to it carries, and an HTTP client
// with its TLS settings. The credentials are OPA's own (package
// plugins/rest): bearer, client_tls, oauth2, s3_signing, gcp_metadata and
// azure_managed_identity behave as they do in OPA.
type Service struct {
	// Name is the service's name, which bundles, decision_logs and
	// status refer to.
	Name string
	// URL is the base URL, without a trailing slash.
	URL string

	headers map[string]string
	client  *http.Client

	// auth is OPA's credentials plugin for the service. Its Prepare is
	// not safe for concurrent use (oauth2 caches its token unguarded), so
	// calls are serialised by authMu.
	authMu sync.Mutex
	auth   rest.HTTPAuthPlugin

	// raw and cfg are the service's settings, for Client.
	raw json.RawMessage
	cfg rest.Config
}

var serviceKeys = []string{"name", "url", "headers", "allow_insecure_tls", "response_header_timeout_seconds", "tls", "credentials", "type"}

// credentialKinds maps each credential kind OPA's rest package reads to
// the settings it knows, taken from the package's own types so that the
// two cannot drift apart. "plugin" (a credentials plugin registered in an
// OPA build) is absent: nexus has no plugin registry.
var credentialKinds = func() map[string][]string {
	out := map[string][]string{}
	f, _ := reflect.TypeFor[rest.Config]().FieldByName("Credentials")
	for i := range f.Type.NumField() {
		kf := f.Type.Field(i)
		kind := jsonName(kf)
		t := kf.Type
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			continue // plugin: a name, not settings
		}
		var keys []string
		for j := range t.NumField() {
			if n := jsonName(t.Field(j)); n != "" && t.Field(j).IsExported() {
				keys = append(keys, n)
			}
		}
		sort.Strings(keys)
		out[kind] = keys
	}
	return out
}()

func jsonName(f reflect.StructField) string {
	n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if n == "-" {
		return ""
	}
	return n
}

// ParseServices reads the services section: either an object of name to
// service, or a list of services each with a name (OPA accepts both).
func ParseServices(raw json.RawMessage) (map[string]*Service, error) {
	out := map[string]*Service{}
	if Absent(raw) {
		return out, nil
	}
	raw = bytes.TrimSpace(raw)
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
	names := slices.Sorted(maps.Keys(entries))
	for _, n := range names {
		s, err := parseService("services."+n, n, entries[n])
		if err != nil {
			return nil, err
		}
		out[n] = s
	}
	return out, nil
}

// parseService checks the service's settings by name (OPA's rest package
// ignores what it does not know), then builds OPA's client for it: the
// credentials plugin and its HTTP client are made here, so that a
// credential OPA would refuse at its first request is refused at start.
func parseService(where, name string, raw json.RawMessage) (*Service, error) {
	m, err := Object(where, raw, serviceKeys)
	if err != nil {
		return nil, err
	}
	var (
		u, typ  string
		timeout *int64
		headers map[string]string
	)
	if err := DecodeFields(where, m, map[string]any{"url": &u, "type": &typ, "response_header_timeout_seconds": &timeout, "headers": &headers}); err != nil {
		return nil, err
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
	if timeout != nil && *timeout < 0 {
		return nil, fmt.Errorf("%s.response_header_timeout_seconds: must not be negative", where)
	}
	if _, err := Object(where+".tls", m["tls"], []string{"ca_cert", "system_ca_required"}); err != nil {
		return nil, err
	}
	kind, err := checkCredentials(where+".credentials", m["credentials"])
	if err != nil {
		return nil, err
	}

	// rest.New fills in OPA's defaults (the response header timeout, the
	// URL without its trailing slash) and the logger its plugins need.
	c, err := rest.New(raw, nil, rest.Logger(logging.NewNoOpLogger()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	cfg := c.Config()
	// Every credentials plugin starts from OPA's TLS settings: read them
	// first so that a bad tls.ca_cert is named as such.
	if _, err := rest.DefaultTLSConfig(*cfg); err != nil {
		return nil, fmt.Errorf("%s.tls.ca_cert: %w", where, err)
	}
	auth, err := cfg.AuthPlugin(nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	hc, err := auth.NewClient(*cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return &Service{Name: name, URL: cfg.URL, headers: headers, client: hc, auth: auth, raw: raw, cfg: *cfg}, nil
}

// checkCredentials refuses an unknown credential kind, more than one
// kind, or a setting the kind does not know, by name. It returns the
// setting that names the kind given (where itself when none is).
func checkCredentials(where string, raw json.RawMessage) (string, error) {
	kinds := slices.Sorted(maps.Keys(credentialKinds))
	cm, err := Object(where, raw, kinds, "plugin")
	if err != nil {
		return "", err
	}
	if len(cm) > 1 {
		return "", fmt.Errorf("%s: give one kind of credentials", where)
	}
	for kind, r := range cm {
		where += "." + kind
		km, err := Object(where, r, credentialKinds[kind])
		if err != nil {
			return "", err
		}
		if kind == "client_tls" {
			if err := checkClientCert(where, km); err != nil {
				return "", err
			}
		}
		if kind == "bearer" {
			var path string
			if err := Decode(where, km, "token_path", &path); err != nil {
				return "", err
			}
			if path != "" {
				if err := checkTokenFile(path); err != nil {
					return "", fmt.Errorf("%s.token_path: %w", where, err)
				}
			}
		}
	}
	return where, nil
}

// checkClientCert loads client_tls' certificate and key once at start
// (OPA loads them at the first handshake), so that a wrong path or a key
// that does not match is refused before the first request. A key with a
// passphrase is left to OPA.
func checkClientCert(where string, m map[string]json.RawMessage) error {
	var cert, key, pass string
	if err := DecodeFields(where, m, map[string]any{"cert": &cert, "private_key": &key, "private_key_passphrase": &pass}); err != nil {
		return err
	}
	if cert == "" || key == "" || pass != "" {
		return nil // OPA names a missing cert or key
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

// checkTokenFile reads a bearer token_path once at start, so that a
// missing file or a file of several lines is refused before the first
// request (OPA reads it again on every request, and so does nexus).
func checkTokenFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if strings.ContainsAny(strings.TrimSpace(string(b)), "\r\n") {
		return fmt.Errorf("%s holds more than one line", path)
	}
	return nil
}

// NewRequest builds a request to the service's URL joined with path,
// with the service's headers and credentials (a token fetched or a
// signature computed now, by OPA's credentials plugin).
func (s *Service) NewRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL+"/"+strings.TrimLeft(path, "/"), body)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	for k, v := range s.headers {
		req.Header.Set(k, v)
	}
	s.authMu.Lock()
	err = s.auth.Prepare(req)
	s.authMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("service %s: credentials: %w", s.Name, err)
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

// Post sends body to the service's URL joined with path, with header set
// over the service's own, reads the answer away and returns its status
// code. what names the request in its error ("log upload").
func (s *Service) Post(ctx context.Context, what, path string, body []byte, header map[string]string) (int, error) {
	req, err := s.NewRequest(ctx, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s failed: %w", what, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Client returns OPA's REST client for the service, as OPA's bundle
// downloader takes it. It shares the service's credentials (prepared under
// the same lock as NewRequest's); wrap, when not nil, wraps the transport of
// each HTTP client it makes.
func (s *Service) Client(wrap func(http.RoundTripper) http.RoundTripper) (rest.Client, error) {
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(s.raw, &m); err != nil {
		return rest.Client{}, fmt.Errorf("service %s: %w", s.Name, err)
	}
	// The credentials become a plugin that hands over to the service's
	// own, so that both clients share one token and one lock.
	m["credentials"] = json.RawMessage(`{"plugin":"nexus"}`)
	raw, err := json.Marshal(m)
	if err != nil {
		return rest.Client{}, fmt.Errorf("service %s: %w", s.Name, err)
	}
	shared := &sharedAuth{s: s, wrap: wrap}
	return rest.New(raw, nil, rest.Logger(logging.NewNoOpLogger()),
		rest.AuthPluginLookup(func(string) rest.HTTPAuthPlugin { return shared }))
}

// sharedAuth is the credentials plugin of the clients Client returns.
type sharedAuth struct {
	s    *Service
	wrap func(http.RoundTripper) http.RoundTripper
}

var _ rest.HTTPAuthPlugin = (*sharedAuth)(nil)

func (a *sharedAuth) NewClient(c rest.Config) (*http.Client, error) {
	c.Credentials = a.s.cfg.Credentials // the service's, not the plugin
	a.s.authMu.Lock()
	hc, err := a.s.auth.NewClient(c)
	a.s.authMu.Unlock()
	if err != nil || a.wrap == nil {
		return hc, err
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc.Transport = a.wrap(next)
	return hc, nil
}

func (a *sharedAuth) Prepare(req *http.Request) error {
	a.s.authMu.Lock()
	defer a.s.authMu.Unlock()
	return a.s.auth.Prepare(req)
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

// ReportTo applies OPA's rule for a section that reports (decision_logs,
// status): the reports go to the service it names or, when it names none
// and does not print to the console, to the only service configured.
// stdout is Stdout when console is set, nil otherwise. where names the
// section.
func ReportTo(services map[string]*Service, where, service string, console bool) (svc *Service, stdout io.Writer, err error) {
	if console {
		stdout = Stdout{}
	}
	if service != "" || (!console && len(services) > 0) {
		if svc, err = Lookup(services, where+".service", service); err != nil {
			return nil, nil, err
		}
	}
	return svc, stdout, nil
}

// Stdout writes to the process' standard output, looked up at each write.
type Stdout struct{}

func (Stdout) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
