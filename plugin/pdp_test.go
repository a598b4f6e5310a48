package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// edgeSchema is a drive whose files the store does not assign to tenants:
// the edge may decide them by the tenant in the path. (A type with a
// "tenant" relation is left out of the snapshot: only the PDP knows its
// resources' tenants.) Folders keep theirs, to show that.
const edgeSchema = `types:
  user: {}
  tenant:
    relations:
      admin: [user]
      editor: [user]
      viewer: [user]
  folder:
    relations:
      tenant: [tenant]
      viewer: [user]
    permissions:
      read: viewer
  file:
    relations:
      owner: [user]
      viewer: [user]
    permissions:
      delete: owner
      read: owner + viewer
roles:
  type: tenant
  grants:
    admin: [file:*, folder:*]
    viewer: [file:read, folder:read]
`

const edgeTuples = `tenant:acme#admin@user:alice
tenant:acme#viewer@user:erin
folder:root#tenant@tenant:acme
file:report.pdf#viewer@user:bob
`

// startPDP runs a real nexus server (admin listener only) on edgeSchema.
func startPDP(t *testing.T) (admin string, store *datastore.BoltStore) {
	t.Helper()
	ctx := context.Background()
	store, err := datastore.Open(ctx, datastore.Config{Path: filepath.Join(t.TempDir(), "nexus.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	sc, err := schema.Parse([]byte(edgeSchema))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(ctx, strings.NewReader(edgeTuples), datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		t.Fatal(err)
	}
	eng, err := builtins.NewEngine(ctx, store, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Close(ctx) })
	mods, err := fixture.Modules(policy.FS)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := policy.FS.ReadFile("data.json")
	b, err := compiler.Compile(ctx, compiler.Options{Modules: mods, DataJSON: data, Entrypoints: []string{policy.EnvoyEntrypoint, policy.AuthzEntrypoint}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pdp.New(ctx, pdp.Config{Engine: eng, Store: store, Relations: store, Policy: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	srv, err := extauthz.New(extauthz.Config{PDP: p, Store: store, GRPCAddr: "-", HTTPAddr: "-", AdminAddr: "127.0.0.1:0", AdminToken: "s3cret-admin-token-16"})
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
	return "http://" + srv.Addr("admin").String(), store
}

// fetchSnapshot does what Envoy does for the plugin's proxy_http_call.
func fetchSnapshot(t *testing.T, admin, etag string) (status, newETag string, body []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, admin+"/v1/edge/snapshot", nil)
	req.Header.Set("Authorization", "Bearer s3cret-admin-token-16")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return strconv.Itoa(resp.StatusCode), resp.Header.Get("ETag"), body
}

const driveConfig = `{
  "pdp_cluster": "nexus_admin",
  "token": "s3cret-admin-token-16",
  "refresh_period_ms": 1000,
  "max_age_ms": 10000,
  "subject": {"header": "x-user-id"},
  "routes": [
    {"method": "GET",    "path": "/tenants/{tenant}/files/*", "action": "read",   "resource_type": "file"},
    {"method": "DELETE", "path": "/tenants/{tenant}/files/*", "action": "delete", "resource_type": "file"}
  ]
}`

// TestSnapshotFromPDP feeds the plugin the snapshot a real nexus serves,
// so that the two sides agree on the format and its meaning: a tenant
// admin is allowed at the edge; a user without a role on a ReBAC type goes
// on to ext_authz; a role written through the admin API reaches the edge on
// the next refresh.
func TestSnapshotFromPDP(t *testing.T) {
	admin, _ := startPDP(t)
	h, root := newPlugin(t, driveConfig)
	status, etag, body := fetchSnapshot(t, admin, "")
	if status != "200" {
		t.Fatalf("snapshot: %s %s", status, body)
	}
	poll(t, h, root, status, etag, body)
	ctx := context.Background()
	send := func(method, path, user string) Result {
		t.Helper()
		res, err := h.Request(ctx, root, req(method, path, user, ""))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check(t, send("DELETE", "/tenants/acme/files/report.pdf", "alice"), wantAllow, "")
	check(t, send("GET", "/tenants/acme/files/report.pdf", "erin"), wantAllow, "")
	check(t, send("DELETE", "/tenants/acme/files/report.pdf", "erin"), wantPass, "")
	check(t, send("GET", "/tenants/acme/files/report.pdf", "carol"), wantPass, "")

	req, _ := http.NewRequest(http.MethodPost, admin+"/v1/relationships", strings.NewReader(`{"touches":["tenant:acme#admin@user:carol"]}`))
	req.Header.Set("Authorization", "Bearer s3cret-admin-token-16")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("write: %v %v", resp, err)
	}
	resp.Body.Close()
	status, etag2, body := fetchSnapshot(t, admin, etag)
	if status != "200" || etag2 == etag {
		t.Fatalf("after a write: %s etag %q (was %q)", status, etag2, etag)
	}
	poll(t, h, root, status, etag2, body)
	check(t, send("GET", "/tenants/acme/files/report.pdf", "carol"), wantAllow, "")
	if status, _, _ := fetchSnapshot(t, admin, etag2); status != "304" {
		t.Fatalf("unchanged snapshot: %s, want 304", status)
	}
}

// TestShippedConfigLoads starts the built filter with the configuration
// users copy (envoy/plugin-config.json): the plugin must accept it.
func TestShippedConfigLoads(t *testing.T) {
	cfg, err := os.ReadFile(filepath.Join("..", "envoy", "plugin-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	h, root := newPlugin(t, string(cfg))
	if calls := h.Calls(); len(calls) != 0 {
		t.Fatalf("calls before the first tick: %v", calls)
	}
	if err := h.Tick(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	calls := h.Calls()
	if len(calls) != 1 || calls[0].Cluster != "nexus_admin" || calls[0].Header(":path") != "/v1/edge/snapshot" {
		t.Fatalf("snapshot call %+v", calls)
	}
}
