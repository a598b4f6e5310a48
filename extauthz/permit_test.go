package extauthz_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestPermitParity covers the Permit PDP endpoints beyond /allowed on the
// drive demo: alice is an admin of acme, erin a viewer of it, bob views
// the folder above report.pdf, carol has nothing.
func TestPermitParity(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name       string
		path, body string
		wantStatus int
		wantBody   string // the whole JSON answer
		wantIn     string // or a substring
	}{
		{name: "all-tenants-rbac", path: "/allowed/all-tenants", body: `{"user":"alice","action":"delete","resource":{"type":"file","key":"report.pdf"}}`,
			wantStatus: 200, wantBody: `{"allowed_tenants":[{"allow":true,"result":true,"debug":{"reason":"rbac"},"tenant":{"key":"acme","attributes":{}}}]}`},
		{name: "all-tenants-type-level", path: "/allowed/all-tenants", body: `{"user":"erin","action":"read","resource":{"type":"file"}}`,
			wantStatus: 200, wantBody: `{"allowed_tenants":[{"allow":true,"result":true,"debug":{"reason":"rbac"},"tenant":{"key":"acme","attributes":{}}}]}`},
		// bob holds no tenant role: the resource's own tenant is tried.
		{name: "all-tenants-rebac", path: "/allowed/all-tenants", body: `{"user":"bob","action":"read","resource":"file:report.pdf"}`,
			wantStatus: 200, wantBody: `{"allowed_tenants":[{"allow":true,"result":true,"debug":{"reason":"rebac"},"tenant":{"key":"acme","attributes":{}}}]}`},
		{name: "all-tenants-none", path: "/allowed/all-tenants", body: `{"user":"carol","action":"read","resource":"file:report.pdf"}`,
			wantStatus: 200, wantBody: `{"allowed_tenants":[]}`},
		{name: "all-tenants-bad", path: "/allowed/all-tenants", body: `{"user":"carol","resource":"file:report.pdf"}`, wantStatus: 400, wantIn: "action is required"},

		{name: "user-tenants", path: "/user-tenants", body: `{"user":{"key":"alice"}}`, wantStatus: 200, wantBody: `[{"key":"acme","attributes":{}}]`},
		{name: "user-tenants-none", path: "/user-tenants", body: `{"user":"carol"}`, wantStatus: 200, wantBody: `[]`},
		{name: "user-tenants-no-user", path: "/user-tenants", body: `{}`, wantStatus: 400, wantIn: "user is required"},

		{name: "url-rbac", path: "/allowed_url", body: `{"user":"alice","http_method":"DELETE","url":"https://drive.example.com/tenants/acme/files/report.pdf","tenant":"other"}`,
			wantStatus: 200, wantBody: `{"allow":true,"result":true,"debug":{"reason":"rbac"},"query":{"user":{"key":"alice"},"action":"delete","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}}`},
		{name: "url-rebac-escaped", path: "/allowed_url", body: `{"user":{"key":"bob"},"http_method":"get","url":"http://drive/files/report%2Epdf?v=1"}`,
			wantStatus: 200, wantBody: `{"allow":true,"result":true,"debug":{"reason":"rebac"},"query":{"user":{"key":"bob"},"action":"read","resource":{"type":"file","key":"report.pdf"}}}`},
		{name: "url-tenant-from-body", path: "/allowed_url", body: `{"user":"erin","http_method":"GET","url":"/files/report.pdf","tenant":"acme"}`,
			wantStatus: 200, wantIn: `"allow":true`},
		{name: "url-deny", path: "/allowed_url", body: `{"user":"carol","http_method":"GET","url":"https://drive.example.com/files/report.pdf","tenant":"acme"}`,
			wantStatus: 200, wantIn: `"allow":false`},
		{name: "url-no-route", path: "/allowed_url", body: `{"user":"alice","http_method":"GET","url":"https://drive.example.com/nowhere","tenant":"acme"}`,
			wantStatus: 200, wantBody: `{"allow":false,"result":false,"debug":{"reason":"no_route","error":"no route rule matches GET https://drive.example.com/nowhere"}}`},
		{name: "url-not-http", path: "/allowed_url", body: `{"user":"alice","http_method":"GET","url":"ftp://drive/files/x"}`, wantStatus: 400, wantIn: "must be an http or https URL"},
		{name: "url-bad-escape", path: "/allowed_url", body: `{"user":"alice","http_method":"GET","url":"/files/%zz"}`, wantStatus: 400, wantIn: "the path does not parse"},
		{name: "url-bad-query", path: "/allowed_url", body: `{"user":"alice","http_method":"GET","url":"/files/x?a=%zz"}`, wantStatus: 400, wantIn: "the query does not parse"},
		{name: "url-no-method", path: "/allowed_url", body: `{"user":"alice","url":"/files/x"}`, wantStatus: 400, wantIn: "http_method is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := post(t, ts.http+tt.path, tt.body)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tt.wantStatus, body)
			}
			if tt.wantBody != "" {
				assertJSON(t, body, tt.wantBody)
			}
			if !strings.Contains(body, tt.wantIn) {
				t.Fatalf("body %s lacks %q", body, tt.wantIn)
			}
		})
	}
}

func TestNginxAllowed(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name       string
		method     string
		headers    map[string]string
		wantStatus int
		wantIn     string
	}{
		{"allow", "GET", map[string]string{"Permit-User-Key": "alice", "Permit-Action": "delete", "Permit-Resource-Type": "file", "Permit-Tenant-Id": "acme"}, 200, `"allow":true`},
		{"allow-post", "POST", map[string]string{"Permit-User-Key": "erin", "Permit-Action": "read", "Permit-Resource-Type": "folder", "Permit-Tenant-Id": "acme"}, 200, `"allow":true`},
		{"deny-is-403", "GET", map[string]string{"Permit-User-Key": "carol", "Permit-Action": "read", "Permit-Resource-Type": "file", "Permit-Tenant-Id": "acme"}, 403, `"allow":false`},
		{"no-user", "GET", map[string]string{"Permit-Action": "read", "Permit-Resource-Type": "file"}, 400, "Permit-User-Key header is required"},
		{"no-type", "GET", map[string]string{"Permit-User-Key": "alice", "Permit-Action": "read"}, 400, "Permit-Resource-Type header is required"},
		{"unknown-type", "GET", map[string]string{"Permit-User-Key": "alice", "Permit-Action": "read", "Permit-Resource-Type": "spaceship"}, 400, "not a type of the schema"},
		{"no-key", "GET", map[string]string{"Authorization": "", "Permit-User-Key": "alice", "Permit-Action": "delete", "Permit-Resource-Type": "file", "Permit-Tenant-Id": "acme"}, 401, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.http+"/nginx_allowed", nil)
			req.Header.Set("Authorization", "Bearer "+testAppKey)
			for k, v := range tt.headers {
				req.Header.Set(k, v)
			}
			status, _, body := do(t, req)
			if status != tt.wantStatus || !strings.Contains(body, tt.wantIn) {
				t.Fatalf("got %d %s, want %d containing %q", status, body, tt.wantStatus, tt.wantIn)
			}
		})
	}
}

func TestKong(t *testing.T) {
	ts := newTestServer(t, nil)
	input := func(method, path, consumer string) string {
		in := map[string]any{"request": map[string]any{"http": map[string]any{"method": method, "path": path, "host": "drive", "port": 8000, "scheme": "http", "headers": map[string]string{"x-user": "alice"}, "querystring": map[string]string{}}}, "client_ip": "10.0.0.1"}
		if consumer != "" {
			in["consumer"] = map[string]any{"id": "5a8ab3a5-6a8e-4c0b-9f16-2c2f0c2c2c2c", "username": consumer}
		}
		b, _ := json.Marshal(map[string]any{"input": in})
		return string(b)
	}
	tests := []struct {
		name, body string
		wantStatus int
		want       string
	}{
		{"rebac-allow", input("GET", "/files/report.pdf", "bob"), 200, `{"result":true}`},
		{"rbac-in-path-tenant", input("delete", "/tenants/acme/files/report.pdf", "alice"), 200, `{"result":true}`},
		{"deny", input("GET", "/files/report.pdf", "carol"), 200, `{"result":false}`},
		// The consumer is the user, never a header the client sent.
		{"no-consumer", input("GET", "/files/report.pdf", ""), 200, `{"result":false}`},
		{"no-route", input("GET", "/nowhere", "alice"), 200, `{"result":false}`},
		{"no-input", `{"request":{}}`, 400, `input is required`},
		{"bad-path", input("GET", "/files/%zz", "bob"), 400, `the path does not parse`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Kong's OPA plugin sends no credentials.
			status, _, body := post(t, ts.http+"/kong", tt.body, "Authorization", "")
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tt.wantStatus, body)
			}
			if tt.wantStatus == 200 {
				assertJSON(t, body, tt.want)
			} else if !strings.Contains(body, tt.want) {
				t.Fatalf("body %s lacks %q", body, tt.want)
			}
		})
	}
}

// TestUserPermissionsConcrete: tenant roles' wildcard grants come out as
// the concrete permissions they give.
func TestUserPermissionsConcrete(t *testing.T) {
	ts := newTestServer(t, nil)
	status, _, body := post(t, ts.http+"/user-permissions", `{"user":"alice","tenants":["acme"],"resources":["file:report.pdf"]}`)
	var perms map[string]struct {
		Permissions []string `json:"permissions"`
		Roles       []string `json:"roles"`
	}
	if err := json.Unmarshal([]byte(body), &perms); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	tenant := perms["__tenant:acme"]
	want := []string{"file:delete", "file:read", "file:view", "file:write", "folder:delete", "folder:read", "folder:view", "folder:write"}
	if strings.Join(tenant.Permissions, ",") != strings.Join(want, ",") || strings.Join(tenant.Roles, ",") != "admin" {
		t.Fatalf("alice in acme: %v %v, want %v as admin", tenant.Permissions, tenant.Roles, want)
	}
	for k, e := range perms {
		for _, p := range e.Permissions {
			if strings.Contains(p, "*") {
				t.Fatalf("%s lists the wildcard %q: %s", k, p, body)
			}
		}
	}
	status, _, body = post(t, ts.http+"/user-permissions", `{"user":"erin","tenants":["acme"]}`)
	if status != 200 || !strings.Contains(body, `"permissions":["file:read","file:view","folder:read","folder:view"]`) {
		t.Fatalf("erin: %d %s", status, body)
	}
}
