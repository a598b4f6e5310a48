package config

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseServicesForms(t *testing.T) {
	for name, raw := range map[string]string{
		"object": `{"acme": {"url": "https://bundles.example.com/v1/"}}`,
		"list":   `[{"name": "acme", "url": "https://bundles.example.com/v1/"}]`,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := ParseServices(json.RawMessage(raw))
			if err != nil {
				t.Fatal(err)
			}
			if got := s["acme"]; got == nil || got.URL != "https://bundles.example.com/v1" || got.Name != "acme" {
				t.Fatalf("got %+v", s)
			}
		})
	}
}

func TestParseServicesRefuses(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`{"a": {"url": "https://x", "retries": 3}}`, `services.a.retries: unknown setting`},
		{`{"a": {"url": "https://x", "credentials": {"plugin": "vault"}}}`, `services.a.credentials.plugin: not supported by nexus`},
		{`{"a": {"url": "https://x", "credentials": {"oauth2": {}}}}`, `services.a.credentials.oauth2: token_url required to use https scheme`},
		{`{"a": {"url": "https://x", "credentials": {"oauth2": {"tokn_url": "https://t"}}}}`, `services.a.credentials.oauth2.tokn_url: unknown setting`},
		{`{"a": {"url": "https://x", "credentials": {"s3_signing": {}}}}`, `services.a.credentials.s3_signing: a AWS credential service must be specified`},
		{`{"a": {"url": "https://x", "credentials": {"bearer": {"token": "t"}, "oauth2": {}}}}`, `services.a.credentials: give one kind of credentials`},
		{`{"a": {"url": "https://x", "credentials": {"client_tls": {"cert": "/nonexistent", "private_key": "/nonexistent"}}}}`, `services.a.credentials.client_tls: open /nonexistent`},
		{`{"a": {"url": "https://x", "credentials": {"bearer": {"token": "t", "tokn": "u"}}}}`, `services.a.credentials.bearer.tokn: unknown setting`},
		{`{"a": {"url": "https://x", "type": "oci"}}`, `services.a.type "oci": not supported by nexus`},
		{`{"a": {"url": "ftp://x"}}`, `services.a.url: want an http or https URL`},
		{`{"a": {"url": "/relative"}}`, `services.a.url: want an http or https URL`},
		{`{"a": {"url": "https://x", "headers": {"X-A": "1\r\nX-Injected: 2"}}}`, `services.a.headers: "X-A" is not a valid header`},
		{`{"a": {"url": "https://x", "tls": {"ca_cert": "/nonexistent"}}}`, `services.a.tls.ca_cert`},
		{`{"a": {"url": "https://x", "credentials": {"bearer": {"token_path": "/nonexistent"}}}}`, `services.a.credentials.bearer.token_path`},
		{`[{"url": "https://x"}]`, `services[0]: a service in a list needs a name`},
		{`[{"name": "a", "url": "https://x"}, {"name": "a", "url": "https://y"}]`, `"a" is named twice`},
		{`"x"`, `services: want an object or a list`},
	} {
		_, err := ParseServices(json.RawMessage(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.raw, err, tc.want)
		}
	}
	_, err := ParseServices(json.RawMessage(`{"a": {"url": "https://x", "credentials": {"plugin": "vault"}}}`))
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("plugin: %v does not wrap ErrUnsupported", err)
	}
}

// TestServiceRequest sends a real request and checks the headers and the
// bearer token, read again from its file after a rotation.
func TestServiceRequest(t *testing.T) {
	var got http.Header
	var path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, path = r.Header.Clone(), r.URL.Path
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(map[string]any{"logs": map[string]any{
		"url":         srv.URL + "/base/",
		"headers":     map[string]string{"X-Tenant": "t1"},
		"credentials": map[string]any{"bearer": map[string]any{"token_path": tok, "scheme": "Token"}},
	}})
	ss, err := ParseServices(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Lookup(ss, "decision_logs.service", "")
	if err != nil {
		t.Fatal(err)
	}
	send := func() {
		t.Helper()
		req, err := s.NewRequest(context.Background(), http.MethodPost, "/logs", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := s.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send()
	if path != "/base/logs" || got.Get("X-Tenant") != "t1" || got.Get("Authorization") != "Token first" {
		t.Fatalf("path %q headers %v", path, got)
	}
	if err := os.WriteFile(tok, []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	send()
	if got.Get("Authorization") != "Token second" {
		t.Fatalf("rotated token not read: %q", got.Get("Authorization"))
	}
	if _, err := Lookup(ss, "bundles.b.service", "other"); err == nil || !strings.Contains(err.Error(), `bundles.b.service: no service named "other"`) {
		t.Fatalf("lookup of a missing service: %v", err)
	}
}
