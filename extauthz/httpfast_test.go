package extauthz_test

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// proxyRequests are raw requests as proxies and applications send them to
// the HTTP listener (nginx auth_request, Caddy forward_auth, Envoy's
// http_service, /allowed, AuthZEN), with the forgeries a client may try
// (a second subject header, a second family of forwarded headers, a path
// that climbs, a wrong key, a cut body).
var proxyRequests = []string{
	"GET /nginx_allowed HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nX-Original-URI: /files/report.pdf\r\nX-Original-Method: GET\r\nX-User: bob\r\n\r\n",
	"GET /ext_authz HTTP/1.1\r\nHost: pdp\r\nX-Original-URI: /files/report.pdf\r\nX-Original-Method: GET\r\nX-User: bob\r\nConnection: close\r\n\r\n",
	"GET /ext_authz HTTP/1.1\r\nHost: pdp\r\nX-Forwarded-Uri: /tenants/acme/files/report.pdf\r\nX-Forwarded-Method: DELETE\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: app\r\nX-User: alice\r\n\r\n",
	"GET /ext_authz HTTP/1.1\r\nHost: pdp\r\nX-Forwarded-Uri: /files/report.pdf\r\nX-Forwarded-Method: GET\r\nX-User: carol\r\nX-User: bob\r\n\r\n",
	"GET /ext_authz HTTP/1.1\r\nHost: pdp\r\nX-Original-URI: /files/report.pdf\r\nX-Forwarded-Uri: /files/other.pdf\r\nX-User: bob\r\n\r\n",
	"PUT /ext_authz/files/report.pdf HTTP/1.1\r\nHost: pdp\r\nX-User: bob\r\nContent-Length: 4\r\n\r\nbody",
	"GET /ext_authz/tenants/acme/../../files/report.pdf HTTP/1.1\r\nHost: pdp\r\nX-User: bob\r\n\r\n",
	"GET /ext_authz/files/report.pdf?x=%zz HTTP/1.1\r\nHost: pdp\r\nX-User: bob\r\n\r\n",
	"POST /allowed HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Type: application/json\r\nContent-Length: 66\r\n\r\n{\"user\":\"bob\",\"action\":\"read\",\"resource\":\"file:report.pdf\"}      ",
	"POST /allowed HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer wrong\r\nContent-Length: 2\r\n\r\n{}",
	"POST /allowed HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Length: 40\r\n\r\n{\"user\":\"bob\",\"action\":\"read\"",
	"POST /allowed HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Length: 9\r\n\r\n{\"user\":1",
	"GET /allowed HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\n\r\n",
	"POST /access/v1/evaluation HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Type: application/json\r\nX-Request-ID: r1\r\nContent-Length: 108\r\n\r\n" +
		`{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`,
	"POST /access/v1/evaluation HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Type: application/json\r\nX-Request-ID: r2\r\nContent-Length: 105\r\n\r\n" +
		`{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`,
	"POST /access/v1/evaluation HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
	"POST /access/v1/evaluations HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Type: application/json\r\nContent-Length: 150\r\n\r\n" +
		`{"subject":{"type":"user","id":"bob"},"evaluations":[{"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}},{"action":{"name":"x"}}]}`,
	"POST /kong HTTP/1.1\r\nHost: pdp\r\nContent-Length: 2\r\n\r\n{}",
	"POST /access/v1/evaluation HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\nContent-Type: application/json\r\nContent-Length: 141\r\n\r\n" +
		`{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`,
	"OPTIONS /access/v1/evaluation HTTP/1.1\r\nHost: pdp\r\nAuthorization: Bearer " + testAppKey + "\r\n\r\n",
	"DELETE /kong HTTP/1.1\r\nHost: pdp\r\n\r\n",
	"PUT /nginx_allowed HTTP/1.1\r\nHost: pdp\r\nX-Original-URI: /files/report.pdf\r\nX-User: bob\r\nContent-Length: 0\r\n\r\n",
	"GET /readyz HTTP/1.1\r\nHost: pdp\r\n\r\nPOST /allowed HTTP/1.1\r\nHost: pdp\r\nContent-Length: 0\r\n\r\n",
}

// answerNoise is what differs between two servers' answers to one
// request: the date, decision and request IDs.
var answerNoise = regexp.MustCompile(`Date: [^\r\n]*|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// settledExchange sends raw on a new connection and returns the answer,
// the noise of answerNoise replaced. The end of the client's stream
// is sent only once the answer has begun, or after answerWait without
// one (a request that waits for more bytes): net/http cancels a
// request's context when it reads the end of the stream, and sent at
// once it may do so while the handler still runs (the fast path cancels
// a request's context when its handler returns, but hands some
// connections to net/http). An answer "canceled" is asked again, up to
// five times.
func settledExchange(t testing.TB, addr string, raw []byte) []byte {
	t.Helper()
	var out []byte
	for range 5 {
		if out = fixture.RawExchangeAfter(t, addr, raw, answerWait); !bytes.Contains(out, []byte(`"reason":"canceled"`)) {
			break
		}
	}
	return answerNoise.ReplaceAll(out, []byte("N"))
}

// answerWait is how long settledExchange waits for an answer to begin
// before it ends its stream.
const answerWait = 100 * time.Millisecond

// fastAndStd starts the default server and one on net/http alone, over
// the same data and policy, and returns their HTTP listeners' addresses.
func fastAndStd(t testing.TB) (fast, std string) {
	t.Helper()
	f := newTestServer(t, func(c *extauthz.Config) { c.MaxBodyBytes = 1 << 10 })
	s := newTestServer(t, func(c *extauthz.Config) { c.MaxBodyBytes = 1 << 10; c.HTTPStdOnly = true })
	return strings.TrimPrefix(f.http, "http://"), strings.TrimPrefix(s.http, "http://")
}

// TestFastHTTPMatchesNetHTTP: the HTTP listener answers every proxy's and
// application's request byte for byte as net/http alone does (but for the
// date and the IDs), allows and denials alike.
func TestFastHTTPMatchesNetHTTP(t *testing.T) {
	fast, std := fastAndStd(t)
	allowed := 0
	for i, raw := range proxyRequests {
		want := settledExchange(t, std, []byte(raw))
		got := settledExchange(t, fast, []byte(raw))
		if !bytes.Equal(got, want) {
			t.Errorf("request %d %q:\nnet/http: %q\nfast:     %q", i, raw, want, got)
		}
		if bytes.HasPrefix(want, []byte("HTTP/1.1 200")) {
			allowed++
		}
	}
	if allowed < 4 {
		t.Fatalf("only %d requests answered 200: the requests do not reach the decisions", allowed)
	}
}

// FuzzFastHTTPMatchesNetHTTP: whatever a client sends to the HTTP
// listener, the answer is net/http's.
func FuzzFastHTTPMatchesNetHTTP(f *testing.F) {
	for _, raw := range proxyRequests {
		f.Add([]byte(raw))
	}
	fast, std := fastAndStd(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		want := settledExchange(t, std, raw)
		got := settledExchange(t, fast, raw)
		if !bytes.Equal(got, want) {
			t.Fatalf("request %q:\nnet/http: %q\nfast:     %q", raw, want, got)
		}
	})
}

// TestForwardAuthDenialNeverSuccess: a denial whose policy asks for an
// informational or 2xx status is answered 403 over forward auth, where a
// proxy would read a 2xx as an allow; other statuses are kept.
func TestForwardAuthDenialNeverSuccess(t *testing.T) {
	for _, std := range []bool{false, true} {
		ts := newTestServer(t, func(c *extauthz.Config) { c.HTTPStdOnly = std })
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
				t.Errorf("std=%v http_status %q: %d %q, want %d \"no\"", std, status, resp.StatusCode, body, want)
			}
		}
	}
}
