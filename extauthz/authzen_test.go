package extauthz_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestAuthZENTransport covers the HTTPS binding of the AuthZEN API on the
// drive demo: status codes, the request ID, the content type, and how
// batches treat their items.
func TestAuthZENTransport(t *testing.T) {
	ts := newTestServer(t, nil)
	const bobReads = `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`
	tests := []struct {
		name        string
		path        string
		body        string
		contentType string // "" means application/json; "-" sends none
		wantStatus  int
		wantBody    string // the whole JSON answer, compared as values
		wantIn      string // or a substring of it
	}{
		{name: "evaluation", path: "/access/v1/evaluation", body: bobReads, wantStatus: 200, wantBody: `{"decision":true,"context":{"reason":"rebac"}}`},
		{name: "charset", path: "/access/v1/evaluation", body: bobReads, contentType: "application/json; charset=utf-8", wantStatus: 200, wantIn: `"decision":true`},
		{name: "text-plain", path: "/access/v1/evaluation", body: bobReads, contentType: "text/plain", wantStatus: 400, wantIn: "Content-Type must be application/json"},
		{name: "form", path: "/access/v1/evaluations", body: bobReads, contentType: "application/x-www-form-urlencoded", wantStatus: 400, wantIn: "Content-Type"},
		{name: "no-content-type", path: "/access/v1/search/action", body: bobReads, contentType: "-", wantStatus: 400, wantIn: "Content-Type"},
		{name: "no-resource-id", path: "/access/v1/evaluation", body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file"}}`, wantStatus: 400, wantIn: "resource.id is required"},
		{name: "no-subject", path: "/access/v1/evaluation", body: `{"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, wantStatus: 400, wantIn: "subject is required"},
		{name: "empty-body", path: "/access/v1/evaluation", body: ``, wantStatus: 400, wantIn: "the body is empty"},
		{name: "unknown-fields-ignored", path: "/access/v1/evaluation", body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"},"foo":"bar","later":{"x":true}}`, wantStatus: 200, wantIn: `"decision":true`},
		{name: "evaluations-without-array", path: "/access/v1/evaluations", body: bobReads, wantStatus: 200, wantBody: `{"decision":true,"context":{"reason":"rebac"}}`},
		{name: "evaluations-empty-array", path: "/access/v1/evaluations", body: strings.TrimSuffix(bobReads, "}") + `,"evaluations":[]}`, wantStatus: 200, wantBody: `{"decision":true,"context":{"reason":"rebac"}}`},
		{name: "evaluations-without-array-incomplete", path: "/access/v1/evaluations", body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"}}`, wantStatus: 400, wantIn: "resource is required"},
		{name: "one-bad-item", path: "/access/v1/evaluations",
			body:       `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"options":{"evaluations_semantic":"execute_all"},"evaluations":[{"resource":{"type":"file","id":"report.pdf"}},{},{"resource":{"type":"spaceship","id":"x"}},{"resource":"notes.txt"},{"resource":{"type":"file","id":"notes.txt"}}]}`,
			wantStatus: 200,
			wantBody: `{"evaluations":[
				{"decision":true,"context":{"reason":"rebac"}},
				{"decision":false,"context":{"reason":"bad_request","error":{"status":400,"message":"evaluations[1]: bad request: resource is required"}}},
				{"decision":false,"context":{"reason":"unknown_resource_type","error":{"status":400,"message":"unknown resource type: resource.type \"spaceship\" is not a type of the schema"}}},
				{"decision":false,"context":{"reason":"bad_request","error":{"status":400,"message":"evaluations[3]: bad request: resource must be an object, not string"}}},
				{"decision":true,"context":{"reason":"rebac"}}]}`},
		{name: "deny-on-first-deny-stops-at-an-error", path: "/access/v1/evaluations",
			body:       `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"options":{"evaluations_semantic":"deny_on_first_deny"},"evaluations":[{"resource":{"type":"file","id":"report.pdf"}},{},{"resource":{"type":"file","id":"notes.txt"}}]}`,
			wantStatus: 200, wantIn: `"status":400`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, ts.http+tt.path, strings.NewReader(tt.body))
			switch tt.contentType {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case "-":
			default:
				req.Header.Set("Content-Type", tt.contentType)
			}
			req.Header.Set("X-Request-ID", "req-"+tt.name)
			req.Header.Set("Authorization", "Bearer "+testAppKey)
			status, h, body := do(t, req)
			if status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", status, tt.wantStatus, body)
			}
			if got := h.Get("X-Request-ID"); got != "req-"+tt.name {
				t.Errorf("X-Request-ID = %q, want the request's", got)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			if tt.wantBody != "" {
				assertJSON(t, body, tt.wantBody)
			}
			if !strings.Contains(body, tt.wantIn) {
				t.Fatalf("body %s lacks %q", body, tt.wantIn)
			}
			if tt.name == "deny-on-first-deny-stops-at-an-error" && strings.Count(body, "decision") != 2 {
				t.Fatalf("deny_on_first_deny went on after an error: %s", body)
			}
		})
	}
}

// assertJSON fails unless got and want are the same JSON value.
func assertJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("answer is not JSON: %s", got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Fatalf("answer\n got %s\nwant %s", gb, wb)
	}
}

func TestAuthZENMetadata(t *testing.T) {
	tests := []struct {
		name      string
		publicURL string
		wantBase  func(ts *testServer) string
	}{
		{name: "from-host", wantBase: func(ts *testServer) string { return ts.http }},
		{name: "public-url", publicURL: "https://pdp.example.com/", wantBase: func(*testServer) string { return "https://pdp.example.com" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, func(c *testConfig) { c.PublicURL = tt.publicURL })
			req, _ := http.NewRequest(http.MethodGet, ts.http+"/.well-known/authzen-configuration", nil)
			req.Header.Set("X-Request-ID", "meta")
			status, h, body := do(t, req)
			if status != 200 || h.Get("Content-Type") != "application/json" || h.Get("X-Request-ID") != "meta" {
				t.Fatalf("%d %v %s", status, h, body)
			}
			base := tt.wantBase(ts)
			assertJSON(t, body, `{
				"policy_decision_point": "`+base+`",
				"access_evaluation_endpoint": "`+base+`/access/v1/evaluation",
				"access_evaluations_endpoint": "`+base+`/access/v1/evaluations",
				"search_subject_endpoint": "`+base+`/access/v1/search/subject",
				"search_resource_endpoint": "`+base+`/access/v1/search/resource",
				"search_action_endpoint": "`+base+`/access/v1/search/action"}`)
		})
	}
}

type searchAnswer struct {
	Page *struct {
		NextToken *string `json:"next_token"`
		Count     int     `json:"count"`
	} `json:"page"`
	Results []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"results"`
}

// names are the result IDs (or action names) in order.
func (a searchAnswer) names() []string {
	out := []string{}
	for _, r := range a.Results {
		out = append(out, r.ID+r.Name)
	}
	return out
}

func search(t *testing.T, url, body string) searchAnswer {
	t.Helper()
	status, _, out := post(t, url, body)
	if status != 200 {
		t.Fatalf("%s: %d %s", url, status, out)
	}
	var a searchAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Results == nil || a.Page == nil || a.Page.NextToken == nil {
		t.Fatalf("%s: not a search answer with results and page.next_token: %s (%v)", url, out, err)
	}
	return a
}

func TestAuthZENSearch(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name, kind, body string
		want             []string
	}{
		// ReBAC: alice owns root, bob views it, dave and frank edit projects
		// (through group eng); RBAC: erin is a viewer of acme.
		{"subjects", "subject", `{"subject":{"type":"user","id":"ignored"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`,
			[]string{"alice", "bob", "dave", "erin", "frank"}},
		{"subjects-write", "subject", `{"subject":{"type":"user"},"action":{"name":"write"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`,
			[]string{"alice", "dave", "frank"}},
		// The store's candidates, every one denied by the policy's ABAC
		// condition on locked files.
		{"subjects-policy-denies", "subject", `{"subject":{"type":"user"},"action":{"name":"write"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme","locked":true}}}`,
			[]string{}},
		{"resources", "resource", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file"}}`,
			[]string{"notes.txt", "report.pdf"}},
		{"resources-rbac-id-ignored", "resource", `{"subject":{"type":"user","id":"erin"},"action":{"name":"read"},"resource":{"type":"file","id":"ignored","properties":{"tenant":"acme"}}}`,
			[]string{"notes.txt", "report.pdf"}},
		{"actions", "action", `{"subject":{"type":"user","id":"bob"},"resource":{"type":"file","id":"report.pdf"}}`,
			[]string{"read", "view"}},
		{"actions-rbac", "action", `{"subject":{"type":"user","id":"alice"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`,
			[]string{"delete", "read", "view", "write"}},
		{"unknown-subject", "action", `{"subject":{"type":"user","id":"nobody"},"resource":{"type":"file","id":"report.pdf"}}`, []string{}},
		{"unknown-subject-type", "subject", `{"subject":{"type":"spaceship"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, []string{}},
		{"unknown-resource-type", "resource", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"spaceship"}}`, []string{}},
		{"unknown-action", "resource", `{"subject":{"type":"user","id":"bob"},"action":{"name":"fly"},"resource":{"type":"file"}}`, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := search(t, ts.http+"/access/v1/search/"+tt.kind, tt.body)
			if got := a.names(); !slices.Equal(got, tt.want) {
				t.Fatalf("results %v, want %v", got, tt.want)
			}
			if *a.Page.NextToken != "" || a.Page.Count != len(tt.want) {
				t.Fatalf("page %+v, want the end and count %d", *a.Page, len(tt.want))
			}
			for _, r := range a.Results {
				if tt.kind != "action" && r.Type == "" {
					t.Fatalf("result without a type: %+v", a.Results)
				}
			}
		})
	}
}

func TestAuthZENSearchPages(t *testing.T) {
	ts := newTestServer(t, nil)
	url := ts.http + "/access/v1/search/subject"
	const q = `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}`
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more pages than results")
		}
		page := `,"page":{"limit":2}}`
		if token != "" {
			page = `,"page":{"limit":2,"token":"` + token + `"}}`
		}
		a := search(t, url, q+page)
		if len(a.Results) > 2 || a.Page.Count != len(a.Results) {
			t.Fatalf("page of %d results (count %d) over a limit of 2", len(a.Results), a.Page.Count)
		}
		got = append(got, a.names()...)
		if token = *a.Page.NextToken; token == "" {
			break
		}
	}
	if want := []string{"alice", "bob", "dave", "erin", "frank"}; !slices.Equal(got, want) {
		t.Fatalf("pages gave %v, want %v", got, want)
	}

	// A token belongs to its request: another resource, another limit or
	// a made-up token is refused.
	a := search(t, url, q+`,"page":{"limit":1}}`)
	tok := *a.Page.NextToken
	for name, body := range map[string]string{
		"other-resource": `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"file","id":"notes.txt"},"page":{"limit":1,"token":"` + tok + `"}}`,
		"other-limit":    q + `,"page":{"limit":3,"token":"` + tok + `"}}`,
		"made-up":        q + `,"page":{"limit":1,"token":"AAAA"}}`,
		"not-base64":     q + `,"page":{"limit":1,"token":"%%%"}}`,
	} {
		if status, _, body := post(t, url, body); status != 400 || !strings.Contains(body, "page.token") {
			t.Errorf("%s: %d %s, want 400 naming page.token", name, status, body)
		}
	}
}

// TestAppAPIKey: every application endpoint needs the key; the proxies'
// endpoints, the metadata and the probes do not.
func TestAppAPIKey(t *testing.T) {
	ts := newTestServer(t, nil)
	endpoints := []struct {
		method, path, body string
		needsKey           bool
	}{
		{"POST", "/access/v1/evaluation", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, true},
		{"POST", "/access/v1/evaluations", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, true},
		{"POST", "/access/v1/search/subject", `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, true},
		{"POST", "/access/v1/search/resource", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file"}}`, true},
		{"POST", "/access/v1/search/action", `{"subject":{"type":"user","id":"bob"},"resource":{"type":"file","id":"report.pdf"}}`, true},
		{"POST", "/allowed", `{"user":"bob","action":"read","resource":"file:report.pdf"}`, true},
		{"POST", "/allowed/bulk", `[{"user":"bob","action":"read","resource":"file:report.pdf"}]`, true},
		{"POST", "/user-permissions", `{"user":"bob"}`, true},
		{"POST", "/authorized_users", `{"action":"read","resource":"file:report.pdf"}`, true},
		{"POST", "/allowed/all-tenants", `{"user":"bob","action":"read","resource":"file:report.pdf"}`, true},
		{"POST", "/allowed_url", `{"user":"bob","http_method":"GET","url":"/files/report.pdf"}`, true},
		{"POST", "/user-tenants", `{"user":"alice"}`, true},
		{"GET", "/nginx_allowed", ``, true},
		{"POST", "/kong", `{"input":{"request":{"http":{"method":"GET","path":"/files/report.pdf"}},"consumer":{"username":"bob"}}}`, false},
		{"GET", "/.well-known/authzen-configuration", ``, false},
		{"GET", "/ext_authz/files/report.pdf", ``, false},
		{"GET", "/healthz", ``, false},
		{"GET", "/readyz", ``, false},
	}
	auths := []struct {
		name, header string
		ok           bool
	}{
		{"none", "", false},
		{"wrong-key", "Bearer nope", false},
		{"admin-style-prefix", "Bearer " + testAppKey + "x", false},
		{"basic", "Basic " + testAppKey, false},
		{"bare-key", testAppKey, false},
		{"key", "Bearer " + testAppKey, true},
		{"lower-case-scheme", "bearer " + testAppKey, true},
	}
	for _, e := range endpoints {
		for _, a := range auths {
			t.Run(strings.TrimPrefix(e.path, "/")+"/"+a.name, func(t *testing.T) {
				req, _ := http.NewRequest(e.method, ts.http+e.path, strings.NewReader(e.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-ID", "r1")
				req.Header.Set("X-User", "bob")
				if a.header != "" {
					req.Header.Set("Authorization", a.header)
				}
				status, h, body := do(t, req)
				refused := status == http.StatusUnauthorized
				if want := e.needsKey && !a.ok; refused != want {
					t.Fatalf("status %d (%s), want refused=%v", status, body, want)
				}
				if refused && (h.Get("WWW-Authenticate") == "" || !strings.Contains(body, `"reason":"unauthorized"`) || h.Get("X-Request-ID") != "r1") {
					t.Fatalf("a refusal without WWW-Authenticate, reason or request ID: %v %s", h, body)
				}
			})
		}
	}
}
