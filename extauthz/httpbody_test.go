package extauthz_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// onlyReader hides a reader's other methods (its length), so that a
// client sends the body chunked.
type onlyReader struct{ io.Reader }

// TestHTTPBodySizes: a check's body is read whole and held to
// MaxBodyBytes however it arrives (with a Content-Length, chunked, at the
// limit or over it), on the listener.
func TestHTTPBodySizes(t *testing.T) {
	const limit = 1024
	ts := newTestServer(t, func(c *testConfig) { c.Core.MaxBodyBytes = limit })
	const check = `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`
	const allow = "{\"allow\":true,\"result\":true,\"debug\":{\"reason\":\"rbac\"}}\n"
	const tooLarge = "{\"error\":\"request body too large: the body is larger than 1024 bytes\",\"reason\":\"too_large\"}\n"
	pad := func(n int) string { return check + strings.Repeat(" ", n-len(check)) }
	for _, tt := range []struct {
		name    string
		body    string
		chunked bool
		status  int
		want    string
	}{
		{"small", check, false, 200, allow},
		{"small-chunked", check, true, 200, allow},
		{"at-limit", pad(limit), false, 200, allow},
		{"at-limit-chunked", pad(limit), true, 200, allow},
		{"over-limit", pad(limit + 1), false, 413, tooLarge},
		{"over-limit-chunked", pad(limit + 1), true, 413, tooLarge},
		{"far-over-limit", pad(100 * limit), false, 413, tooLarge},
		{"far-over-limit-chunked", pad(100 * limit), true, 413, tooLarge},
		{"empty", "", false, 400, "{\"error\":\"bad request: the body is empty\",\"reason\":\"bad_request\"}\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = onlyReader{iotest.HalfReader(body)}
			}
			req, err := http.NewRequest(http.MethodPost, ts.http+"/allowed", body)
			if err != nil {
				t.Fatal(err)
			}
			if tt.chunked {
				req.ContentLength = -1 // unknown: sent chunked
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAppKey)
			status, _, got := do(t, req)
			if status != tt.status || got != tt.want {
				t.Fatalf("got %d %q, want %d %q", status, got, tt.status, tt.want)
			}
		})
	}
}

// TestHTTPBodyContentLengthLies: a body longer than its Content-Length
// says is read whole, and held to MaxBodyBytes, by the handler (net/http
// never hands one over, but a caller of the handler may); one shorter is
// read as far as it goes.
func TestHTTPBodyContentLengthLies(t *testing.T) {
	const limit = 1024
	ts := newTestServer(t, func(c *testConfig) { c.Core.MaxBodyBytes = limit })
	h := ts.srv.HTTPHandler()
	const check = `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`
	const allow = "{\"allow\":true,\"result\":true,\"debug\":{\"reason\":\"rbac\"}}\n"
	const tooLarge = "{\"error\":\"request body too large: the body is larger than 1024 bytes\",\"reason\":\"too_large\"}\n"
	for _, tt := range []struct {
		name   string
		body   string
		length int64
		status int
		want   string
	}{
		{"longer-than-said", check, 10, 200, allow},
		{"longer-than-said-by-one", check, int64(len(check) - 1), 200, allow},
		{"none-said", check, 0, 200, allow},
		{"shorter-than-said", check, int64(len(check) + 100), 200, allow},
		{"longer-than-said-over-limit", check + strings.Repeat(" ", limit), 10, 413, tooLarge},
		{"longer-than-said-at-limit", check + strings.Repeat(" ", limit-len(check)), int64(len(check)), 200, allow},
		{"said-at-limit-over-limit", check + strings.Repeat(" ", limit-len(check)+1), limit, 413, tooLarge},
		{"said-over-limit", check, limit + 1, 200, allow},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/allowed", iotest.HalfReader(strings.NewReader(tt.body)))
			req.ContentLength = tt.length
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+testAppKey)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || rec.Body.String() != tt.want {
				t.Fatalf("got %d %q, want %d %q", rec.Code, rec.Body, tt.status, tt.want)
			}
		})
	}
}

// TestHTTPBodyCutShort: a client that promises more body than it sends
// and stops gets no decision but a 400 that says why (the fault is the
// client's).
func TestHTTPBodyCutShort(t *testing.T) {
	ts := newTestServer(t, nil)
	const check = `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`
	head := "POST /allowed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer " + testAppKey + "\r\n"
	for _, tc := range []struct{ name, req string }{
		{"content-length", head + "Content-Length: " + strconv.Itoa(len(check)+10) + "\r\n\r\n" + check},
		{"chunked", head + "Transfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(check)), 16) + "\r\n" + check[:20]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(ts.http, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err = io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			if status, _, b := answer(t, resp); status != http.StatusBadRequest || !strings.Contains(b, "the request body ended early") {
				t.Fatalf("got %d %q, want 400 saying the body ended early", status, b)
			}
		})
	}
}

// TestHTTPBodyKeepsConnection: a check read whole leaves the connection
// open for the next one.
func TestHTTPBodyKeepsConnection(t *testing.T) {
	ts := newTestServer(t, nil)
	const check = `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for i := range 3 {
		reused := false
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, ts.http+"/allowed", strings.NewReader(check))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testAppKey)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"allow":true`) {
			t.Fatalf("request %d: %d %s %v", i, resp.StatusCode, b, err)
		}
		if i > 0 && !reused {
			t.Fatalf("request %d: a new connection", i)
		}
	}
}
