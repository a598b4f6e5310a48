package extauthz_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestAdminCheck: /v1/check answers in lower-case JSON, takes "relation"
// for "permission", and names what it refuses.
func TestAdminCheck(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantBody   string // the whole JSON answer
		wantIn     string // or a substring
	}{
		{name: "allowed", body: `{"object":"file:report.pdf","permission":"read","subject":"user:bob"}`, wantStatus: 200, wantBody: `{"allowed":true}`},
		{name: "relation", body: `{"object":"file:report.pdf","relation":"read","subject":"user:carol"}`, wantStatus: 200, wantBody: `{"allowed":false}`},
		{name: "both-agree", body: `{"object":"file:report.pdf","permission":"read","relation":"read","subject":"user:bob"}`, wantStatus: 200, wantBody: `{"allowed":true}`},
		{name: "trace", body: `{"object":"folder:projects","relation":"editor","subject":"user:dave","trace":true}`, wantStatus: 200,
			wantBody: `{"allowed":true,"trace":{"kind":"relation","object":"folder:projects","name":"editor","result":true,"children":[
				{"kind":"tuple","name":"folder:projects#editor@group:eng#member","result":true,"children":[
					{"kind":"relation","object":"group:eng","name":"member","result":true,"children":[
						{"kind":"tuple","name":"group:eng#member@user:dave","result":true}]}]}]}}`},
		{name: "both-differ", body: `{"object":"file:report.pdf","permission":"read","relation":"write","subject":"user:bob"}`, wantStatus: 400, wantIn: `permission \"read\" and relation \"write\" differ`},
		{name: "neither", body: `{"object":"file:report.pdf","subject":"user:bob"}`, wantStatus: 400, wantIn: "permission (or relation) is required"},
		{name: "unknown-field", body: `{"object":"file:report.pdf","perm":"read","subject":"user:bob"}`, wantStatus: 400, wantIn: `unknown field \"perm\" (accepted: object, permission, relation, subject, trace)`},
		{name: "trailing", body: `{"object":"file:report.pdf","permission":"read","subject":"user:bob"} {}`, wantStatus: 400, wantIn: "unexpected data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := post(t, ts.admin+"/v1/check", tt.body)
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

// TestAdminUnknownParams: every admin endpoint names a query parameter it
// does not take.
func TestAdminUnknownParams(t *testing.T) {
	ts := newTestServer(t, nil)
	tests := []struct {
		method, path, body string
		wantIn             string
	}{
		{"GET", "/v1/schema?format=json", "", `unknown query parameter \"format\"`},
		{"GET", "/v1/policy?x=1", "", `unknown query parameter \"x\"`},
		{"PUT", "/v1/policy?force=true", "", `unknown query parameter \"force\"`},
		{"POST", "/v1/check?trace=true", `{"object":"file:report.pdf","permission":"read","subject":"user:bob"}`, `unknown query parameter \"trace\"`},
		{"POST", "/v1/relationships?dry_run=1", `{"touches":["folder:q3#viewer@user:carol"]}`, `unknown query parameter \"dry_run\"`},
		{"GET", "/v1/edge/snapshot?v=2", "", `unknown query parameter \"v\"`},
		{"GET", "/v1/relationships?objecttype=file", "", `unknown query parameter \"objecttype\"`},
		{"PUT", "/v1/schema?forse=true", "types: {user: {}}", `unknown query parameter \"forse\"`},
		{"POST", "/v1/relationships", `{"touch":["folder:q3#viewer@user:carol"]}`, `unknown field \"touch\" (accepted: touches, deletes, preconditions)`},
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.admin+tt.path, strings.NewReader(tt.body))
			status, _, body := do(t, req)
			if status != 400 || !strings.Contains(body, tt.wantIn) {
				t.Fatalf("got %d %s, want 400 containing %q", status, body, tt.wantIn)
			}
		})
	}
	// Nothing was written by the refused write.
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/relationships?object_type=folder&object_id=q3&relation=viewer", nil)
	if _, _, body := do(t, req); strings.Contains(body, "carol") {
		t.Fatalf("a refused request wrote: %s", body)
	}
}
