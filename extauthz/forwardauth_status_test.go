package extauthz_test

import (
	"io"
	"net/http"
	"testing"
)

// TestForwardAuthDenialNeverSuccess: a denial whose policy asks for an
// informational or 2xx status is answered 403 over forward auth, where a
// proxy would read a 2xx as an allow; other statuses are kept.
func TestForwardAuthDenialNeverSuccess(t *testing.T) {
	ts := newTestServer(t, nil)
	for status, want := range map[string]int{"100": 403, "200": 403, "204": 403, "302": 302, "401": 401, "": 403} {
		rule := `result := {"allowed": false, "body": "no"}`
		if status != "" {
			rule = `result := {"allowed": false, "body": "no", "http_status": ` + status + `}`
		}
		if code, body := putPolicy(t, ts, "status-"+status, map[string]string{
			"p.rego": "package nexus.authz\ndecision := {\"allow\": false}\n",
			"e.rego": "package nexus.envoy\n" + rule + "\n",
		}, "nexus/authz/decision", "nexus/envoy/result"); code != 200 {
			t.Fatalf("put policy: %d %s", code, body)
		}
		req, _ := http.NewRequest(http.MethodGet, ts.http+"/ext_authz/files/report.pdf", nil)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want || string(body) != "no" {
			t.Errorf("http_status %q: %d %q, want %d \"no\"", status, resp.StatusCode, body, want)
		}
	}
}
