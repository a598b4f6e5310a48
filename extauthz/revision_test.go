package extauthz_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// tokenChecker asks whether user may read file:report.pdf on one
// transport, with a consistency token (raw: as the transport carries it;
// for the JSON APIs a JSON value) unless raw is "". It returns whether the
// request was allowed, the HTTP status and the reason code.
type tokenChecker func(t *testing.T, ts *testServer, user, raw string) (allowed bool, status int, reason string)

var tokenTransports = map[string]tokenChecker{
	"grpc": func(t *testing.T, ts *testServer, user, raw string) (bool, int, string) {
		h := map[string]string{"x-user": user}
		if raw != "" {
			h["x-nexus-revision"] = raw
		}
		resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", "/files/report.pdf", h))
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if resp.GetStatus().GetCode() == int32(codes.OK) {
			return true, 200, headerValue(resp.GetOkResponse().GetHeaders(), "x-nexus-decision")
		}
		d := resp.GetDeniedResponse()
		return false, int(d.GetStatus().GetCode()), headerValue(d.GetHeaders(), "x-nexus-reason")
	},
	"forward-auth": func(t *testing.T, ts *testServer, user, raw string) (bool, int, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.http+"/ext_authz/files/report.pdf", nil)
		req.Header.Set("X-User", user)
		if raw != "" {
			req.Header.Set("X-Nexus-Revision", raw)
		}
		status, h, _ := do(t, req)
		return status == 200, status, h.Get("X-Nexus-Reason")
	},
	"authzen": func(t *testing.T, ts *testServer, user, raw string) (bool, int, string) {
		ctx := ""
		if raw != "" {
			ctx = `,"context":{"nexus_revision":` + raw + `}`
		}
		status, _, body := post(t, ts.http+"/access/v1/evaluation",
			`{"subject":{"type":"user","id":"`+user+`"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}`+ctx+`}`)
		var r struct {
			Decision bool   `json:"decision"`
			Reason   string `json:"reason"`
		}
		_ = json.Unmarshal([]byte(body), &r)
		return status == 200 && r.Decision, status, r.Reason
	},
	"permit": func(t *testing.T, ts *testServer, user, raw string) (bool, int, string) {
		ctx := ""
		if raw != "" {
			ctx = `,"context":{"nexus_revision":` + raw + `}`
		}
		status, _, body := post(t, ts.http+"/allowed", `{"user":"`+user+`","action":"read","resource":"file:report.pdf"`+ctx+`}`)
		var r struct {
			Allow  bool   `json:"allow"`
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal([]byte(body), &r)
		return status == 200 && r.Allow, status, r.Reason
	},
}

// quote makes raw a JSON string for the JSON transports.
func tokenFor(transport, tok string) string {
	if transport == "authzen" || transport == "permit" {
		return strconv.Quote(tok)
	}
	return tok
}

func adminJSON(t *testing.T, method, url, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	status, _, b := do(t, req)
	if status != 200 {
		t.Fatalf("%s %s: %d %s", method, url, status, b)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatalf("%s %s: %v: %s", method, url, err, b)
	}
	return out
}

// TestConsistencyTokenSingleNode: on a single store, a write's revision
// as a token sees the write on every transport; a token above the store's
// revision fails closed after the bounded wait (503,
// revision_unavailable), even for a request the data would allow.
func TestConsistencyTokenSingleNode(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.Core.RevisionWait = 50 * time.Millisecond })
	before := uint64(adminJSON(t, "GET", ts.admin+"/v1/revision", "")["revision"].(float64))
	for name, check := range tokenTransports {
		t.Run(name, func(t *testing.T) {
			user := "token-" + name
			if allowed, _, _ := check(t, ts, user, ""); allowed {
				t.Fatalf("%s allowed before the write", user)
			}
			w := adminJSON(t, "POST", ts.admin+"/v1/relationships", `{"touches":["file:report.pdf#viewer@user:`+user+`"]}`)
			rev := uint64(w["revision"].(float64))
			if rev <= before {
				t.Fatalf("write revision %d, not after %d", rev, before)
			}
			if now := uint64(adminJSON(t, "GET", ts.admin+"/v1/revision", "")["revision"].(float64)); now < rev {
				t.Fatalf("GET /v1/revision %d after a write at %d", now, rev)
			}
			tok := strconv.FormatUint(rev, 10)
			if allowed, status, reason := check(t, ts, user, tokenFor(name, tok)); !allowed {
				t.Fatalf("token %s: denied (%d %s) after the write", tok, status, reason)
			}
			// bob may read the file: a token the store has not reached
			// still denies him.
			ahead := strconv.FormatUint(rev+1000, 10)
			start := time.Now()
			allowed, status, reason := check(t, ts, "bob", tokenFor(name, ahead))
			if allowed || status != http.StatusServiceUnavailable || reason != "revision_unavailable" {
				t.Fatalf("token %s ahead of the store: allowed=%v status=%d reason=%q, want a 503 revision_unavailable deny", ahead, allowed, status, reason)
			}
			if time.Since(start) < 50*time.Millisecond {
				t.Fatalf("answered before the bounded wait")
			}
		})
	}
}

// TestConsistencyTokenAdversary mutates the token of a request the data
// allows (bob reads report.pdf): every malformed token is a 400 deny,
// never an allow and never a server error.
func TestConsistencyTokenAdversary(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.Core.RevisionWait = 20 * time.Millisecond })
	bad := []string{"0", "-1", "abc", "1e3", "1.0", "18446744073709551616", "99999999999999999999999", "01", " 5", "5 ", "5,6", "0x10", "+5", "5\t", "１"}
	for name, check := range tokenTransports {
		t.Run(name, func(t *testing.T) {
			if allowed, status, reason := check(t, ts, "bob", tokenFor(name, "1")); !allowed {
				t.Fatalf("a reached token denied bob: %d %s", status, reason)
			}
			toks := make([]string, 0, len(bad)+6)
			for _, b := range bad {
				if name == "grpc" || name == "forward-auth" {
					if strings.ContainsAny(b, " \t") || b == "１" {
						continue // not a header value an HTTP client sends as is
					}
				}
				toks = append(toks, tokenFor(name, b))
			}
			if name == "authzen" || name == "permit" {
				toks = append(toks, `1.5`, `-3`, `true`, `null`, `{"r":1}`, `[1]`, `1e400`)
			}
			for _, tok := range toks {
				allowed, status, reason := check(t, ts, "bob", tok)
				if allowed || status != http.StatusBadRequest || reason != "bad_request" {
					t.Errorf("token %s: allowed=%v status=%d reason=%q, want a 400 bad_request deny", tok, allowed, status, reason)
				}
			}
		})
	}
}
