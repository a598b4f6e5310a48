package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/status"

	"github.com/nexuspdp/nexus/bundle"
)

// TestStatusReportsDownloadedBundle: with bundles and status in serve's
// OPA configuration, the status report (read with OPA's type) carries the
// downloaded bundle's status, reported when it is activated.
func TestStatusReportsDownloadedBundle(t *testing.T) {
	dir := t.TempDir()
	tarball := opaRegoBundle(t, "rev-b1", "package envoy.authz\n\nallow if input.user == \"bob\"\n")
	var mu sync.Mutex
	var reports []status.UpdateRequestV1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bundles/authz":
			w.Header().Set("Content-Type", "application/gzip")
			_, _ = w.Write(tarball.Bytes())
		case "/status/":
			var rep status.UpdateRequestV1
			if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
				t.Errorf("decoding a status report: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			reports = append(reports, rep)
			mu.Unlock()
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	raw := []byte("services:\n  acme:\n    url: " + srv.URL + "\nbundles:\n  authz:\n    service: acme\nstatus:\n  service: acme\nplugins:\n  envoy_ext_authz_grpc:\n    path: envoy/authz/allow\n")
	c, err := readOPAServeConfig(filepath.Join(dir, "config.yaml"), raw)
	if err != nil {
		t.Fatal(err)
	}
	c.DataDir = dir
	ol, err := startOPALogging(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ol.closeAfter(t.Context())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := serveBundles(ctx, c, slog.New(slog.DiscardHandler), ol.reportLoads(func(context.Context, *bundle.Bundle) error { return nil }))
	if err != nil || s == nil {
		t.Fatalf("serveBundles: %v", err)
	}
	ol.bundlesFrom(s)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		var got *status.UpdateRequestV1
		for i := range reports {
			if b := reports[i].Bundles["authz"]; b != nil && b.ActiveRevision == "rev-b1" {
				got = &reports[i]
			}
		}
		mu.Unlock()
		if got != nil {
			if got.Plugins["bundle"] == nil || got.Plugins["bundle"].State != "OK" || got.Bundles["authz"].LastSuccessfulActivation.IsZero() {
				t.Fatalf("report %+v", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report with the bundle's revision; bundles %+v", s.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
