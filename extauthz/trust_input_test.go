package extauthz_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/pdp"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// An endpoint that reads a JSON body, with a valid body for it.
type jsonEndpoint struct {
	admin      bool
	path, body string
}

// jsonEndpoints are every endpoint of the application and admin APIs that
// reads a JSON body.
var jsonEndpoints = []jsonEndpoint{
	{path: "/access/v1/evaluation", body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`},
	{path: "/access/v1/evaluations", body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file","id":"report.pdf"}},{"resource":{"type":"file","id":"notes.txt"}}]}`},
	{path: "/access/v1/search/resource", body: `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file"}}`},
	{path: "/access/v1/search/subject", body: `{"subject":{"type":"user"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`},
	{path: "/access/v1/search/action", body: `{"subject":{"type":"user","id":"bob"},"resource":{"type":"file","id":"report.pdf"}}`},
	{path: "/allowed", body: `{"user":"bob","action":"read","resource":"file:report.pdf"}`},
	{path: "/allowed/bulk", body: `{"checks":[{"user":"bob","action":"read","resource":"file:report.pdf"},{"user":"carol","action":"read","resource":"file:report.pdf"}]}`},
	{path: "/allowed/all-tenants", body: `{"user":"bob","action":"read","resource":"file:report.pdf"}`},
	{path: "/allowed_url", body: `{"user":"bob","http_method":"GET","url":"/files/report.pdf"}`},
	{path: "/user-permissions", body: `{"user":"bob"}`},
	{path: "/user-tenants", body: `{"user":"alice"}`},
	{path: "/authorized_users", body: `{"action":"read","resource":{"type":"file","key":"report.pdf"}}`},
	{path: "/kong", body: `{"input":{"request":{"http":{"method":"GET","path":"/files/report.pdf"}}}}`},
	{admin: true, path: "/v1/check", body: `{"object":"file:report.pdf","permission":"read","subject":"user:bob"}`},
	{admin: true, path: "/v1/relationships", body: `{"touches":["file:report.pdf#viewer@user:mallory"]}`},
}

func (e jsonEndpoint) url(ts *testServer) string {
	if e.admin {
		return ts.admin + e.path
	}
	return ts.http + e.path
}

// with puts member first in the endpoint's body object.
func (e jsonEndpoint) with(member string) string {
	return "{" + member + "," + e.body[1:]
}

// TestHostileJSONRefused: on every endpoint that reads JSON, a body
// nested 9,000 deep, one with a key twice and one that is not UTF-8 are
// refused with 400 naming the problem, and nothing is written.
func TestHostileJSONRefused(t *testing.T) {
	ts := newTestServer(t, nil)
	deep := strings.Repeat(`{"a":`, 9000) + "1" + strings.Repeat("}", 9000)
	faults := []struct {
		name, member, wantIn string
	}{
		{"deep-9000", `"zz":` + deep, "JSON nested deeper than 64"},
		{"deep-arrays", `"zz":` + strings.Repeat("[", 65) + strings.Repeat("]", 65), "JSON nested deeper than 64"},
		{"duplicate-key", `"zz":1,"zz":2`, `duplicate key \"zz\"`},
		{"invalid-utf8", "\"zz\":\"\xff\xfe\"", "not valid UTF-8"},
	}
	for _, e := range jsonEndpoints {
		for _, f := range faults {
			t.Run(e.path+"/"+f.name, func(t *testing.T) {
				status, _, body := post(t, e.url(ts), e.with(f.member))
				if status != http.StatusBadRequest || !strings.Contains(body, f.wantIn) || !strings.Contains(body, `"reason":"bad_request"`) {
					t.Fatalf("%d %s, want 400 containing %q", status, body, f.wantIn)
				}
			})
		}
	}
	status, _, body := post(t, ts.admin+"/v1/relationships?"+"object_type=file&subject_id=mallory&subject_type=user", "")
	if status == http.StatusOK && strings.Contains(body, "mallory") {
		t.Fatalf("a refused write was applied: %s", body)
	}
}

// TestDuplicateKeyCannotFlipDecision is the adversary's version: the
// same key twice, the first denied and the last allowed, as encoding/json
// (last wins) and another reader (first wins) would disagree.
func TestDuplicateKeyCannotFlipDecision(t *testing.T) {
	ts := newTestServer(t, nil)
	for _, tt := range []struct{ path, body string }{
		{"/allowed", `{"user":"carol","action":"read","resource":"file:report.pdf","user":"bob"}`},
		{"/allowed", `{"user":{"key":"carol","key":"bob"},"action":"read","resource":"file:report.pdf"}`},
		{"/access/v1/evaluation", `{"subject":{"type":"user","id":"carol","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`},
		{"/access/v1/evaluations", `{"subject":{"type":"user","id":"carol"},"action":{"name":"read"},"evaluations":[{"resource":{"type":"file","id":"report.pdf"},"subject":{"type":"user","id":"bob"},"subject":{"type":"user","id":"bob"}}]}`},
		{"/allowed/bulk", `[{"user":"carol","action":"read","resource":"file:report.pdf","user":"bob"}]`},
	} {
		status, _, body := post(t, ts.http+tt.path, tt.body)
		if status != http.StatusBadRequest || strings.Contains(body, "true") {
			t.Errorf("%s %s: %d %s, want 400 and no allow", tt.path, tt.body, status, body)
		}
	}
}

// TestInvalidUTF8OutsideTheBody: a query parameter, a path or a check
// field from headers that is not UTF-8 is refused (400), never decided.
func TestInvalidUTF8OutsideTheBody(t *testing.T) {
	ts := newTestServer(t, nil)
	const allowed = `{"user":"bob","action":"read","resource":"file:report.pdf"}`
	status, _, body := post(t, ts.http+"/allowed?x=%FF", allowed)
	if status != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8") {
		t.Errorf("query: %d %s, want 400", status, body)
	}
	status, _, body = post(t, ts.http+"/access/v1/evaluation?%FE=1", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`)
	if status != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8") {
		t.Errorf("AuthZEN query: %d %s, want 400", status, body)
	}
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/relationships?object_type=file&object_id=%FF", nil)
	if status, _, body := do(t, req); status != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8") {
		t.Errorf("admin query: %d %s, want 400", status, body)
	}
	// Every route's path is fixed: a path that is not UTF-8 is none of
	// them, and is never answered as one.
	if status, _, body := post(t, ts.http+"/allowed%FF", allowed); status < 400 {
		t.Errorf("path: %d %s, want an error", status, body)
	}
	req, _ = http.NewRequest(http.MethodGet, ts.http+"/nginx_allowed", nil)
	req.Header.Set("Authorization", "Bearer "+testAppKey)
	req.Header.Set("Permit-User-Key", "bob")
	req.Header.Set("Permit-Action", "read\xff")
	req.Header.Set("Permit-Resource-Type", "file")
	if status, _, body := do(t, req); status != http.StatusBadRequest || !strings.Contains(body, "action is not valid UTF-8") {
		t.Errorf("nginx_allowed header: %d %s, want 400", status, body)
	}
	status, _, body = post(t, ts.http+"/authorized_users", "{\"action\":\"re\xffad\",\"resource\":{\"type\":\"file\",\"key\":\"report.pdf\"}}")
	if status != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8") {
		t.Errorf("authorized_users: %d %s, want 400", status, body)
	}
}

// TestBatchAndBodyLimits: a batch over the limit of checks, and a body
// over the limit of bytes, are 413 naming the limit.
func TestBatchAndBodyLimits(t *testing.T) {
	ts := newTestServer(t, nil)
	items := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	const max = extauthz.DefaultMaxBatch
	perm := `{"user":"bob","action":"read","resource":"file:report.pdf"}`
	for _, tt := range []struct{ name, path, body, wantIn string }{
		{"evaluations", "/access/v1/evaluations", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"evaluations":[` + items(max+1, `{"resource":{"type":"file","id":"report.pdf"}}`) + `]}`, fmt.Sprintf("%d evaluations, at most %d", max+1, max)},
		{"bulk", "/allowed/bulk", "[" + items(max+1, perm) + "]", fmt.Sprintf("at most %d", max)},
		{"bulk-checks", "/allowed/bulk", `{"checks":[` + items(max+1, perm) + "]}", fmt.Sprintf("at most %d", max)},
		{"user-permissions", "/user-permissions", `{"user":"bob","resources":[` + items(max+1, `"file:report.pdf"`) + "]}", fmt.Sprintf("at most %d", max)},
		{"body", "/allowed", `{"user":"bob","action":"read","resource":"file:report.pdf","context":{"pad":"` + strings.Repeat("x", pdp.DefaultMaxBodyBytes) + `"}}`, fmt.Sprintf("larger than %d bytes", pdp.DefaultMaxBodyBytes)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := post(t, ts.http+tt.path, tt.body)
			if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, tt.wantIn) || !strings.Contains(body, `"reason":"too_large"`) {
				t.Fatalf("%d %s, want 413 containing %q", status, body, tt.wantIn)
			}
		})
	}
	// At the limit, a batch is answered.
	status, _, body := post(t, ts.http+"/allowed/bulk", "["+items(max, perm)+"]")
	if status != http.StatusOK {
		t.Fatalf("a batch of %d: %d %s", max, status, body)
	}
}

// spin is a policy whose every evaluation runs until its deadline.
var spin = map[string]string{"p.rego": `package nexus.authz

spin if {
	some i in numbers.range(1, 20000)
	some j in numbers.range(1, 20000)
	i == j - 30000
}

decision := {"allow": spin}
`, "e.rego": envoyDeny}

// envoyDeny is an Envoy entrypoint for test policies of the application
// API: the server requires one.
const envoyDeny = "package nexus.envoy\nresult := {\"allowed\": false}\n"

// TestBatchBudget: a batch whose evaluations together run past the
// request's budget (twice the evaluation timeout) is refused whole with
// 503 budget_exceeded, well before its evaluations' timeouts add up.
func TestBatchBudget(t *testing.T) {
	const evalTimeout = 100 * time.Millisecond
	ts := newTestServer(t, func(c *testConfig) { c.Core.EvalTimeout = evalTimeout })
	if status, body := putPolicy(t, ts, "spin", spin, "nexus/authz/decision", "nexus/envoy/result"); status != 200 {
		t.Fatalf("put policy: %d %s", status, body)
	}
	var evals []string
	for i := range 20 {
		evals = append(evals, fmt.Sprintf(`{"resource":{"type":"file","id":"f%d"}}`, i))
	}
	for _, tt := range []struct{ path, body string }{
		{"/access/v1/evaluations", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"evaluations":[` + strings.Join(evals, ",") + `]}`},
		{"/allowed/bulk", `[` + strings.Repeat(`{"user":"bob","action":"read","resource":"file:report.pdf"},`, 19) + `{"user":"bob","action":"read","resource":"file:notes.txt"}]`},
	} {
		start := time.Now()
		status, _, body := post(t, ts.http+tt.path, tt.body)
		took := time.Since(start)
		var got struct{ Error, Reason string }
		_ = json.Unmarshal([]byte(body), &got)
		if status != http.StatusServiceUnavailable || got.Reason != pdp.CodeBudget || strings.Contains(body, "engine") {
			t.Errorf("%s: %d %s, want 503 %s with a fixed description", tt.path, status, body, pdp.CodeBudget)
		}
		// 20 evaluations of 100 ms would take 2 s; the budget is 200 ms.
		// The bound is generous: a loaded machine is slow, not that slow.
		if took > 20*evalTimeout/2 {
			t.Errorf("%s took %v: the budget did not stop the batch", tt.path, took)
		}
	}
}

// TestNoInternalTextToClients: whatever fails inside nexus (an evaluation
// past its deadline, a result that is not a decision), no endpoint
// answers with the internal text: no engine or Go words, only the code and
// a fixed description. The details go to the log.
func TestNoInternalTextToClients(t *testing.T) {
	leaks := []string{"engine", "eval ", "wasm", "wazero", "pdp:", "json:", "Go ", "context deadline", "goroutine", "unmarshal", "interface {", "map[", "*", "0x"}
	policies := map[string]map[string]string{
		"deadline":   spin,
		"bad-result": {"p.rego": "package nexus.authz\ndecision := {\"allow\": \"yes\"}\n", "e.rego": envoyDeny},
		"undefined":  {"p.rego": "package nexus.authz\ndecision := {\"allow\": true} if input.nothing\n", "e.rego": envoyDeny},
	}
	for name, modules := range policies {
		t.Run(name, func(t *testing.T) {
			logs := &fixture.SyncBuffer{}
			ts := newTestServer(t, func(c *testConfig) {
				c.Core.EvalTimeout = 50 * time.Millisecond
				c.Logger = slog.New(slog.NewTextHandler(logs, nil))
			})
			if status, body := putPolicy(t, ts, name, modules, "nexus/authz/decision", "nexus/envoy/result"); status != 200 {
				t.Fatalf("put policy: %d %s", status, body)
			}
			failed := 0
			for _, e := range jsonEndpoints {
				if e.admin {
					continue // the admin check reads the store, not the policy
				}
				status, _, body := post(t, e.url(ts), e.body)
				for _, leak := range leaks {
					if strings.Contains(body, leak) {
						t.Errorf("%s: %d %s: the client sees %q", e.path, status, body, leak)
					}
				}
				if strings.Contains(body, `"allow":true`) || strings.Contains(body, `"decision":true`) {
					t.Errorf("%s: %d %s: allowed by a failing policy", e.path, status, body)
				}
				if status >= 500 || strings.Contains(body, `"error"`) {
					failed++
				}
			}
			if failed == 0 {
				t.Fatal("no endpoint failed: the test policy does not fail")
			}
			if !strings.Contains(logs.String(), "err=") {
				t.Errorf("the log lacks the details: %s", logs.String())
			}
		})
	}
}
