package extauthz_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/internal/fixture"
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

// TestAdminTokenScheme: the admin API takes the Bearer scheme in any case
// (RFC 7235), and the token only exactly: no mutation of the token, of the
// scheme's spelling or of the separator is let in.
func TestAdminTokenScheme(t *testing.T) {
	const token = "admin-token-for-scheme-tests"
	ts := newTestServer(t, func(c *testConfig) { c.AdminToken = token })
	status := func(auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/revision", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		s, _, _ := do(t, req)
		return s
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token, "BEARER " + token, "bEaReR " + token, "Bearer  " + token} {
		if s := status(auth); s != http.StatusOK {
			t.Errorf("%q: %d, want 200", auth, s)
		}
	}
	wrong := 0
	for _, auth := range []string{
		"", token, "Bearer", "Bearer ", "Bearer" + token, "Basic " + token, "Token " + token, "Bearer\t" + token,
		"Bearer " + token[:len(token)-1], "Bearer " + token + "x", "Bearer " + strings.ToUpper(token), "Bearer x" + token,
		"Bearers " + token, "Bear " + token, "Bearer " + token[1:],
	} {
		if s := status(auth); s != http.StatusUnauthorized {
			wrong++
			t.Errorf("%q: %d, want 401", auth, s)
		}
	}
	if wrong > 0 {
		t.Errorf("%d wrong allows", wrong)
	}
}

// TestAdminPolicyLimits: a bundle over a limit is refused with 413 naming
// it, and the policy in place keeps serving; one whose data.json cannot be
// held by a policy instance once parsed is a 413 too, never a 500.
func TestAdminPolicyLimits(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.BundleLimits = bundle.Limits{Data: 4096} })
	put := func(b *bundle.Bundle) (int, string) {
		t.Helper()
		var buf bytes.Buffer
		if err := b.Write(&buf); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPut, ts.admin+"/v1/policy", &buf)
		status, _, body := do(t, req)
		return status, body
	}
	base := fixture.Bundle(t)
	big := *base
	big.Data = []byte(`{"pad":"` + strings.Repeat("x", 5000) + `"}`)
	if status, body := put(&big); status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "data.json limit of 4096 bytes") || !strings.Contains(body, `"too_large"`) {
		t.Fatalf("data.json over its limit: %d %s, want 413 naming the limit", status, body)
	}
	// Under the limit but too large for an instance: 64 KiB pages, the
	// default 256 MiB; an array of numbers parses to far more than its text.
	ts2 := newTestServer(t, func(c *testConfig) { c.BundleLimits = bundle.Limits{Data: 64 << 20} })
	huge := *base
	var sb strings.Builder
	sb.WriteString(`{"n":[`)
	for i := range 3 << 20 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('0')
	}
	sb.WriteString(`]}`)
	huge.Data = []byte(sb.String())
	var buf bytes.Buffer
	if err := huge.Write(&buf); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, ts2.admin+"/v1/policy", &buf)
	status, _, body := do(t, req)
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "does not fit in a policy instance's memory") {
		t.Fatalf("data.json too large once parsed: %d %s, want 413", status, body)
	}
	// The policy in place still answers.
	if status, _, body := post(t, ts.http+"/access/v1/evaluation", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, "Authorization", "Bearer "+testAppKey); status != 200 || !strings.Contains(body, `"decision":true`) {
		t.Fatalf("after the refused bundles: %d %s", status, body)
	}
}
