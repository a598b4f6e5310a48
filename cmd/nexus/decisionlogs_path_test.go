package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/logs"

	"github.com/nexuspdp/nexus/pdp"
)

// logsConfig writes an OPA configuration in dir that uploads decision
// logs to the collector at url, with plugin (one line of the plugin's
// settings besides addr) and extra top-level sections, and returns its
// path.
func logsConfig(t *testing.T, dir, url, plugin, extra string) string {
	t.Helper()
	return writeFile(t, dir, "config.yaml", `
services:
  acme:
    url: `+url+`
decision_logs:
  service: acme
plugins:
  envoy_ext_authz_grpc:
    addr: 127.0.0.1:0
    `+plugin+`
nexus:
  data_dir: `+filepath.Join(dir, "data")+`
`+extra)
}

// eventsOf starts a collector of decision log uploads and returns its
// URL and a function that returns the events received so far, read with
// OPA's own EventV1 and also as raw JSON objects.
func eventsOf(t *testing.T) (string, func() ([]logs.EventV1, []map[string]json.RawMessage)) {
	t.Helper()
	var mu sync.Mutex
	var raws []json.RawMessage
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/logs" {
			http.NotFound(w, r)
			return
		}
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var evs []json.RawMessage
		if err := json.NewDecoder(zr).Decode(&evs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		raws = append(raws, evs...)
		mu.Unlock()
	}))
	t.Cleanup(svc.Close)
	return svc.URL, func() ([]logs.EventV1, []map[string]json.RawMessage) {
		mu.Lock()
		defer mu.Unlock()
		evs := make([]logs.EventV1, len(raws))
		objs := make([]map[string]json.RawMessage, len(raws))
		for i, raw := range raws {
			if err := json.Unmarshal(raw, &evs[i]); err != nil {
				t.Fatalf("event %s: %v", raw, err)
			}
			if err := json.Unmarshal(raw, &objs[i]); err != nil {
				t.Fatalf("event %s: %v", raw, err)
			}
		}
		return evs, objs
	}
}

// logOneDecision runs nexus run's command line (args, the configuration
// file config among them) up to its settings, starts the decision logging
// they configure, logs one decision of iface for the settings' Envoy
// entrypoint with revision rev, flushes it, and returns the settings.
func logOneDecision(t *testing.T, iface, rev string, args ...string) serveConfig {
	t.Helper()
	c, err := runArgs(args...)
	if err != nil {
		t.Fatalf("nexus run %v: %v", args, err)
	}
	o, err := startOPALogging(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Logger == nil {
		t.Fatal("no decision logger")
	}
	o.Logger.Record(&pdp.DecisionRecord{
		ID: "d1", Time: time.Now(), Path: c.Core.EnvoyEntrypoint, Interface: iface, Revision: rev,
		Input: json.RawMessage(`{"a":1}`), Result: json.RawMessage(`true`),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.Logger.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDecisionLogPathAsThePluginLogsIt: the path (or query) of the
// events of ext_authz decisions is the decision exactly as
// opa-envoy-plugin logs it: its path as configured, its default when
// neither is set, or its deprecated query as configured with no path.
// Forward auth, which the plugin does not have, logs the entrypoint.
func TestDecisionLogPathAsThePluginLogsIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		plugin string // the plugin section's settings besides addr
		iface  string
		// wantEntrypoint is what nexus evaluates; wantPath and wantQuery
		// what the event says ("" means absent).
		wantEntrypoint, wantPath, wantQuery string
	}{
		{"slash path", "path: envoy/authz/allow", pdp.IfaceGRPC, "envoy/authz/allow", "envoy/authz/allow", ""},
		{"leading slash", "path: /envoy/authz/allow", pdp.IfaceGRPC, "envoy/authz/allow", "/envoy/authz/allow", ""},
		{"trailing slash", "path: /istio/authz/allow/", pdp.IfaceGRPC, "istio/authz/allow", "/istio/authz/allow/", ""},
		{"dotted path", "path: envoy.authz.allow", pdp.IfaceGRPC, "envoy/authz/allow", "envoy.authz.allow", ""},
		{"data reference path", "path: data.envoy.authz.allow", pdp.IfaceGRPC, "envoy/authz/allow", "data.envoy.authz.allow", ""},
		{"default", "dry-run: false", pdp.IfaceGRPC, "envoy/authz/allow", "envoy/authz/allow", ""},
		{"query", "query: data.envoy.authz.allow", pdp.IfaceGRPC, "envoy/authz/allow", "", "data.envoy.authz.allow"},
		{"forward auth", "path: /envoy/authz/allow", pdp.IfaceHTTP, "envoy/authz/allow", "envoy/authz/allow", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, events := eventsOf(t)
			dir := t.TempDir()
			config := logsConfig(t, dir, url, tc.plugin, "")
			c := logOneDecision(t, tc.iface, "", "--server", "--config-file="+config, filepath.Join(dir, "policy"))
			if c.Core.EnvoyEntrypoint != tc.wantEntrypoint {
				t.Fatalf("entrypoint %q, want %q", c.Core.EnvoyEntrypoint, tc.wantEntrypoint)
			}
			evs, objs := events()
			if len(evs) != 1 {
				t.Fatalf("%d events, want 1", len(evs))
			}
			if evs[0].DecisionID != "d1" || evs[0].Path != tc.wantPath || evs[0].Query != tc.wantQuery {
				t.Fatalf("event path %q query %q (decision %q), want path %q query %q", evs[0].Path, evs[0].Query, evs[0].DecisionID, tc.wantPath, tc.wantQuery)
			}
			// OPA leaves an empty path or query out of the event.
			for key, want := range map[string]string{"path": tc.wantPath, "query": tc.wantQuery} {
				if _, present := objs[0][key]; present != (want != "") {
					t.Errorf("event has %q: %v, want %v", key, present, want != "")
				}
			}
		})
	}
}

// TestDecisionLogBundlesAsOPALogsThem: the events name in "bundles" what
// OPA activated as a bundle, and nothing for a directory or a file of
// Rego: a .tar.gz policy or one that --bundle names a bundle by its path
// as given, a downloaded bundle by its configured name, with the loaded
// revision.
func TestDecisionLogBundlesAsOPALogsThem(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flags    []string
		policy   string // "" gives none (the bundles section brings it)
		bundles  string // the configuration's bundles section, if any
		rev      string
		wantName string // "" means no bundles at all
	}{
		{name: "directory", policy: "policy", rev: "r1"},
		{name: "rego file", policy: "policy/authz.rego"},
		{name: "directory with --bundle", flags: []string{"--bundle"}, policy: "./policy", rev: "r1", wantName: "./policy"},
		{name: "bundle file", policy: "build/bundle.tar.gz", rev: "r2", wantName: "build/bundle.tar.gz"},
		{name: "bundle file without revision", policy: "bundle.tar.gz", wantName: "bundle.tar.gz"},
		{name: "downloaded bundle", bundles: "bundles:\n  authz:\n    service: acme\n", rev: "r3", wantName: "authz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, events := eventsOf(t)
			dir := t.TempDir()
			config := logsConfig(t, dir, url, "path: envoy/authz/allow", tc.bundles)
			args := append([]string{"--server", "--config-file=" + config}, tc.flags...)
			if tc.policy != "" {
				args = append(args, tc.policy)
			}
			logOneDecision(t, pdp.IfaceGRPC, tc.rev, args...)
			evs, objs := events()
			if len(evs) != 1 {
				t.Fatalf("%d events, want 1", len(evs))
			}
			if tc.wantName == "" {
				if raw, present := objs[0]["bundles"]; present {
					t.Fatalf("event has bundles %s, want none", raw)
				}
				return
			}
			b, ok := evs[0].Bundles[tc.wantName]
			if len(evs[0].Bundles) != 1 || !ok || b.Revision != tc.rev {
				t.Fatalf("event bundles %+v, want %q with revision %q", evs[0].Bundles, tc.wantName, tc.rev)
			}
		})
	}
}
