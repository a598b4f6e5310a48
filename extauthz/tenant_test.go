package extauthz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// writeTuples writes the tuples txt to the test server's store.
func writeTuples(t *testing.T, ts *testServer, txt ...string) {
	t.Helper()
	var touches []api.Tuple
	for _, s := range txt {
		tu, err := api.ParseTuple(s)
		if err != nil {
			t.Fatal(err)
		}
		touches = append(touches, tu)
	}
	if _, err := ts.store.Write(context.Background(), datastore.WriteRequest{Touches: touches}); err != nil {
		t.Fatal(err)
	}
}

// TestInheritedTenant: a file without a tenant of its own is in its
// folder's: alice, an acme admin, may not delete a file in a globex
// folder by naming acme, over gRPC, forward auth, /allowed or AuthZEN,
// any more than the folder itself; a file the store does not hold is in
// no tenant (files require one) and denied as no_tenant, whatever the
// case of its ID; a folder chain whose tenant is beyond the walk's depth
// is denied.
func TestInheritedTenant(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx := context.Background()
	writeTuples(t, ts, "folder:groot#tenant@tenant:globex", "file:child.pdf#parent@folder:groot",
		"folder:gsub#parent@folder:groot", "file:deep.pdf#parent@folder:gsub",
		"file:secret.pdf#tenant@tenant:globex", "tenant:globex#admin@user:gina")
	var chain []string
	for i := 0; i < 34; i++ {
		chain = append(chain, fmt.Sprintf("folder:z%d#parent@folder:z%d", i, i+1))
	}
	writeTuples(t, ts, append(chain, "folder:z34#tenant@tenant:acme")...)

	grpcCheck := func(method, path string, hdr map[string]string) (bool, string) {
		resp, err := ts.grpc.Check(ctx, fixture.EnvoyRequest(method, path, hdr))
		if err != nil {
			// A failed evaluation is an error status: Envoy denies.
			return false, "error"
		}
		return resp.GetStatus().GetCode() == 0, headerValue(resp.GetDeniedResponse().GetHeaders(), "x-nexus-decision")
	}
	forward := func(method, uri string, hdr map[string]string) (bool, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.http+"/ext_authz", nil)
		req.Header.Set("X-Original-URI", uri)
		req.Header.Set("X-Original-Method", method)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		status, h, _ := do(t, req)
		return status == 200, h.Get("X-Nexus-Decision")
	}
	reasonOf := func(body string) string {
		for _, r := range []string{"tenant_mismatch", "no_tenant", "no_grant", "rbac", "rebac", "depth"} {
			if strings.Contains(body, r) {
				return r
			}
		}
		return body
	}
	permit := func(user, resource string) (bool, string) {
		_, _, body := post(t, ts.http+"/allowed", `{"user":"`+user+`","action":"delete","resource":`+resource+`}`)
		return strings.Contains(body, `"allow":true`), reasonOf(body)
	}
	authzen := func(user, id, tenant string) (bool, string) {
		_, _, body := post(t, ts.http+"/access/v1/evaluation", `{"subject":{"type":"user","id":"`+user+`"},"action":{"name":"delete"},"resource":{"type":"file","id":"`+id+`","properties":{"tenant":"`+tenant+`"}}}`)
		return strings.Contains(body, `"decision":true`), reasonOf(body)
	}
	alice := map[string]string{"x-user": "alice"}
	tests := []struct {
		name       string
		allowed    func() (bool, string)
		want       bool
		wantReason string
	}{
		{"grpc-folder-claims-acme", func() (bool, string) { return grpcCheck("DELETE", "/tenants/acme/folders/groot", alice) }, false, "tenant_mismatch"},
		{"grpc-file-claims-acme", func() (bool, string) { return grpcCheck("DELETE", "/tenants/acme/files/child.pdf", alice) }, false, "tenant_mismatch"},
		{"grpc-deep-file-claims-acme", func() (bool, string) { return grpcCheck("DELETE", "/tenants/acme/files/deep.pdf", alice) }, false, "tenant_mismatch"},
		{"grpc-header-claims-acme", func() (bool, string) {
			return grpcCheck("DELETE", "/files/child.pdf", map[string]string{"x-user": "alice", "x-tenant": "acme"})
		}, false, "tenant_mismatch"},
		{"grpc-no-claim-inherited", func() (bool, string) { return grpcCheck("DELETE", "/files/child.pdf", alice) }, false, "no_grant"},
		{"grpc-globex-admin", func() (bool, string) {
			return grpcCheck("DELETE", "/files/child.pdf", map[string]string{"x-user": "gina"})
		}, true, ""},
		{"grpc-unknown-id", func() (bool, string) { return grpcCheck("DELETE", "/tenants/acme/files/SECRET.pdf", alice) }, false, "no_tenant"},
		{"grpc-beyond-depth", func() (bool, string) { return grpcCheck("DELETE", "/tenants/acme/folders/z0", alice) }, false, "error"},
		{"forward-auth-beyond-depth", func() (bool, string) { return forward("DELETE", "/tenants/acme/folders/z0", alice) }, false, ""},
		{"permit-beyond-depth", func() (bool, string) { return permit("alice", `{"type":"folder","key":"z0","tenant":"acme"}`) }, false, ""},
		{"forward-auth-file-claims-acme", func() (bool, string) { return forward("DELETE", "/tenants/acme/files/child.pdf", alice) }, false, "tenant_mismatch"},
		{"forward-auth-unknown-id", func() (bool, string) { return forward("DELETE", "/tenants/acme/files/SECRET.pdf", alice) }, false, "no_tenant"},
		{"forward-auth-known-id", func() (bool, string) { return forward("DELETE", "/tenants/acme/files/secret.pdf", alice) }, false, "tenant_mismatch"},
		{"permit-file-claims-acme", func() (bool, string) {
			return permit("alice", `{"type":"file","key":"child.pdf","tenant":"acme"}`)
		}, false, "tenant_mismatch"},
		{"permit-folder-claims-acme", func() (bool, string) {
			return permit("alice", `{"type":"folder","key":"groot","tenant":"acme"}`)
		}, false, "tenant_mismatch"},
		{"permit-unknown-id", func() (bool, string) {
			return permit("alice", `{"type":"file","key":"SECRET.pdf","tenant":"acme"}`)
		}, false, "no_tenant"},
		{"permit-globex-admin-no-claim", func() (bool, string) { return permit("gina", `"file:child.pdf"`) }, true, "rbac"},
		{"authzen-file-claims-acme", func() (bool, string) { return authzen("alice", "child.pdf", "acme") }, false, "tenant_mismatch"},
		{"authzen-unknown-id", func() (bool, string) { return authzen("alice", "SECRET.pdf", "acme") }, false, "no_tenant"},
		{"acme-own-file", func() (bool, string) { return permit("alice", `{"type":"file","key":"report.pdf","tenant":"acme"}`) }, true, "rbac"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := tt.allowed()
			if got != tt.want || (tt.wantReason != "" && reason != tt.wantReason) {
				t.Fatalf("allowed = %v (reason %q), want %v (reason %q)", got, reason, tt.want, tt.wantReason)
			}
		})
	}

	// Listings: the users who may delete child.pdf are globex's admins,
	// never acme's, whatever tenant the request names.
	for _, body := range []string{
		`{"action":"delete","resource":{"type":"file","key":"child.pdf"}}`,
		`{"action":"delete","resource":{"type":"file","key":"child.pdf","tenant":"acme"}}`,
	} {
		_, _, out := post(t, ts.http+"/authorized_users", body)
		if strings.Contains(out, `"alice"`) {
			t.Errorf("/authorized_users %s lists alice: %s", body, out)
		}
		if strings.Contains(body, "acme") {
			continue
		}
		if !strings.Contains(out, `"gina"`) {
			t.Errorf("/authorized_users %s does not list gina, globex's admin: %s", body, out)
		}
	}
	for _, body := range []string{
		`{"subject":{"type":"user"},"action":{"name":"delete"},"resource":{"type":"file","id":"child.pdf"}}`,
		`{"subject":{"type":"user"},"action":{"name":"delete"},"resource":{"type":"file","id":"child.pdf","properties":{"tenant":"acme"}}}`,
	} {
		_, _, out := post(t, ts.http+"/access/v1/search/subject", body)
		if strings.Contains(out, `"alice"`) {
			t.Errorf("subject search %s lists alice: %s", body, out)
		}
	}
	_, _, out := post(t, ts.http+"/access/v1/search/resource", `{"subject":{"type":"user","id":"alice"},"action":{"name":"delete"},"resource":{"type":"file"}}`)
	if strings.Contains(out, "child.pdf") || strings.Contains(out, "deep.pdf") {
		t.Errorf("resource search lists a globex file for alice: %s", out)
	}
}

// TestEdgeSnapshotLeavesInheritingTypes: the edge filter reads a
// request's tenant from the request, so a type whose resources inherit a
// tenant (or must have one) is left out of its snapshot, as a type with
// a stored tenant is: only the PDP can tell the claim false.
func TestEdgeSnapshotLeavesInheritingTypes(t *testing.T) {
	ts := newTestServer(t, nil)
	ctx := context.Background()
	src := strings.Replace(string(drive.Schema), "\nroles:", `
  note:
    relations:
      parent: [folder]
      viewer: [user]
    permissions:
      read: viewer
    tenancy: {inherit: [parent]}
  memo:
    relations:
      viewer: [user]
    permissions:
      read: viewer

roles:`, 1)
	src = strings.Replace(src, "admin: [file:*, folder:*]", "admin: [file:*, folder:*, note:*, memo:*]", 1)
	sc, err := datastore.ParseSchema([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.store.WriteSchema(ctx, sc, false); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/edge/snapshot", nil)
	status, _, body := do(t, req)
	if status != 200 {
		t.Fatalf("snapshot: %d %s", status, body)
	}
	var snap api.EdgeSnapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.ResourceTypes["note"]; ok {
		t.Fatalf("a type that inherits a tenant is in the edge snapshot: %v", snap.ResourceTypes)
	}
	if _, ok := snap.ResourceTypes["memo"]; !ok {
		t.Fatalf("a type without tenants is not in the edge snapshot: %v", snap.ResourceTypes)
	}
}
