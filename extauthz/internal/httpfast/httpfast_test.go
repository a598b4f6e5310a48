package httpfast

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// echo answers with what it was given: the request as the handler sees it
// (method, target, URL, Host, Close, ContentLength, headers, body and the
// error reading it), with a status and a header the query chooses, so that
// both the parse and the response writing are compared. It counts the
// requests the fast path served.
type echo struct{ fast atomic.Int64 }

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := w.(*response); ok {
		e.fast.Add(1)
	}
	q := r.URL.Query()
	var b strings.Builder
	fmt.Fprintf(&b, "method=%q uri=%q path=%q rawpath=%q query=%q host=%q proto=%q close=%v length=%d\n",
		r.Method, r.RequestURI, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host, r.Proto, r.Close, r.ContentLength)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%q: %q\n", k, r.Header[k])
	}
	if _, ok := q["skipbody"]; !ok {
		body, err := io.ReadAll(r.Body)
		fmt.Fprintf(&b, "body=%q err=%v\n", body, err)
	}
	if v, ok := q["h"]; ok {
		w.Header()["X-Echo"] = v
	}
	if v := q.Get("ct"); v != "" {
		w.Header().Set("Content-Type", v)
	}
	if s, err := strconv.Atoi(q.Get("s")); err == nil && s >= 200 && s <= 999 {
		w.WriteHeader(s)
	}
	if _, ok := q["nobody"]; !ok {
		_, _ = io.WriteString(w, b.String())
	}
}

// serve starts h behind net/http alone and behind a Server (every path
// fast) and returns their addresses.
func serve(t testing.TB, h http.Handler) (std, fast string) {
	t.Helper()
	ls, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lf, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 2 * time.Second}
	fs := &Server{
		Fallback: &http.Server{Handler: h, ReadHeaderTimeout: 2 * time.Second},
		Route: func(_, path string) (http.Handler, string) {
			if strings.HasPrefix(path, "/slow") {
				return nil, ""
			}
			return h, ""
		},
		ReadHeaderTimeout: 2 * time.Second,
		MaxBodyBytes:      1 << 10,
		Log:               slog.New(slog.DiscardHandler),
	}
	go func() { _ = hs.Serve(ls) }()
	go func() { _ = fs.Serve(lf) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		if err := fs.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return ls.Addr().String(), lf.Addr().String()
}

// exchange is fixture.RawExchange with the dates blanked.
func exchange(t testing.TB, addr string, raw []byte) []byte {
	t.Helper()
	return dates.ReplaceAll(fixture.RawExchange(t, addr, raw), []byte("Date: D\r\n"))
}

var dates = regexp.MustCompile(`Date: [^\r\n]*\r\n`)

// plain are requests of the shape the Server reads itself; every one must
// be served on the fast path.
var plain = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /x?y=1&z=%20 HTTP/1.1\r\nHost: example.com:8080\r\nX-User: alice\r\nx-user: bob\r\nAccept: */*\r\n\r\n",
	"POST /allowed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"user\":\"a\"}\n",
	"POST /allowed HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
	"GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b?s=404 HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
	"DELETE /ext_authz/p%2Fq HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /never HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /?s=204 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /?s=304&ct=text/plain HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /?h=a%0d%0aSet-Cookie:%20x&h=%c3%a9 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /?s=403&nobody HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /?s=299 HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /?ct=application/json HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nX-Tab:\tv\t\r\n\r\n",
	"POST /?skipbody HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /after HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nshort",
	"PUT /x HTTP/1.1\r\nHost: [::1]:80\r\nContent-Length: 3\r\n\r\nabc",
	"GET //double/../dot HTTP/1.1\r\nHost: h\r\n\r\n",
	"OPTIONS /x HTTP/1.1\r\nHost: h\r\n\r\n",
}

// other are requests the Server hands to net/http, which must answer
// them as it would alone.
var other = []string{
	"GET / HTTP/1.0\r\nHost: h\r\n\r\n",
	"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\nHost: h\n\n",
	"\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Folded: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Bad : a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Utf8: \xc3\xa9\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nX-Ctl: a\x01b\r\n\r\n",
	"GET http://other/ HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET * HTTP/1.1\r\nHost: h\r\n\r\n",
	"G@T / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nPragma: no-cache\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h/x\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2048\r\n\r\n" + strings.Repeat("x", 2048),
	"GET / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.0\r\n\r\n",
	"GET /" + strings.Repeat("a", 5000) + " HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
}

// TestMatchesNetHTTP: for each request, the Server's answer is byte for
// byte net/http's (but for the Date), and the plain ones were read on
// the fast path.
func TestMatchesNetHTTP(t *testing.T) {
	h := &echo{}
	std, fast := serve(t, h)
	for i, raw := range append(slices.Clone(plain), other...) {
		before := h.fast.Load()
		want := exchange(t, std, []byte(raw))
		got := exchange(t, fast, []byte(raw))
		if !bytes.Equal(got, want) {
			t.Errorf("request %d %q:\nnet/http: %q\nhttpfast: %q", i, raw, want, got)
		}
		if served := h.fast.Load() - before; i < len(plain) && served == 0 {
			t.Errorf("request %d %q was not served on the fast path", i, raw)
		} else if i >= len(plain) && served != 0 && !strings.HasPrefix(raw, "GET / HTTP/1.1\r\nHost: h\r\n\r\n") {
			t.Errorf("request %d %q was served on the fast path", i, raw)
		}
	}
}

// FuzzMatchesNetHTTP: whatever bytes a client sends, the Server answers as
// net/http does.
func FuzzMatchesNetHTTP(f *testing.F) {
	for _, raw := range append(slices.Clone(plain), other...) {
		f.Add([]byte(raw))
	}
	h := &echo{}
	std, fast := serve(f, h)
	f.Fuzz(func(t *testing.T, raw []byte) {
		want := exchange(t, std, raw)
		got := exchange(t, fast, raw)
		if !bytes.Equal(got, want) {
			t.Fatalf("request %q:\nnet/http: %q\nhttpfast: %q", raw, want, got)
		}
	})
}

// TestHandOverKeepsServing: a connection handed over at its second request
// keeps being served, by net/http, for the requests after it.
func TestHandOverKeepsServing(t *testing.T) {
	h := &echo{}
	_, fast := serve(t, h)
	raw := "GET /1 HTTP/1.1\r\nHost: h\r\n\r\n" +
		"POST /2 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n" +
		"GET /3 HTTP/1.1\r\nHost: h\r\n\r\n"
	out := string(exchange(t, fast, []byte(raw)))
	if n := strings.Count(out, "HTTP/1.1 200 OK"); n != 3 {
		t.Fatalf("%d answers, want 3: %q", n, out)
	}
	if !strings.Contains(out, `body="hi"`) || !strings.Contains(out, `path="/3"`) {
		t.Fatalf("answers: %q", out)
	}
	if h.fast.Load() != 1 {
		t.Fatalf("fast path served %d requests, want 1", h.fast.Load())
	}
}

// TestSlowHeadClosed: a head that does not arrive within ReadHeaderTimeout
// closes the connection without an answer.
func TestSlowHeadClosed(t *testing.T) {
	_, fast := serve(t, &echo{})
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	out, _ := io.ReadAll(c)
	if len(out) != 0 || time.Since(start) > 8*time.Second {
		t.Fatalf("after %v: %q", time.Since(start), out)
	}
}

// TestPanicClosesConnection: a handler's panic closes its connection and
// the Server goes on serving others.
func TestPanicClosesConnection(t *testing.T) {
	_, fast := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	if out := exchange(t, fast, []byte("GET /panic HTTP/1.1\r\nHost: h\r\n\r\n")); len(out) != 0 {
		t.Fatalf("panic answered %q", out)
	}
	if out := exchange(t, fast, []byte("GET / HTTP/1.1\r\nHost: h\r\n\r\n")); !bytes.HasSuffix(out, []byte("\r\n\r\nok")) {
		t.Fatalf("after a panic: %q", out)
	}
}

// TestShutdown: Shutdown closes idle connections at once, lets a request
// in progress finish (with "Connection: close"), and refuses new ones.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Fallback: &http.Server{Handler: h}, Route: func(string, string) (http.Handler, string) { return h, "" }, Log: slog.New(slog.DiscardHandler)}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	idle, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, _ = io.WriteString(busy, "GET /wait HTTP/1.1\r\nHost: h\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle connection: %d, %v; want it closed", n, err)
	}
	close(release)
	_ = busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, _ := io.ReadAll(busy)
	if !bytes.Contains(out, []byte("Connection: close\r\n")) || !bytes.HasSuffix(out, []byte("done")) {
		t.Fatalf("request in progress answered %q", out)
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
}

// BenchmarkKeepAlive is one check-shaped request and its answer on a
// keep-alive connection over loopback, served by net/http alone and by a
// Server, with a handler that reads the body and answers a small JSON
// object. The client's share is the same in both; cpu-ns/op is the whole
// process's CPU time.
func BenchmarkKeepAlive(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"allow":true}`)
	})
	std, fast := serve(b, h)
	body := `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`
	req := []byte("POST /allowed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer k\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	for _, s := range []struct{ name, addr string }{{"net-http", std}, {"httpfast", fast}} {
		b.Run(s.name, func(b *testing.B) {
			c, err := net.Dial("tcp", s.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			b.ReportAllocs()
			cpu0 := fixture.ProcessCPU()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
					b.Fatal(resp.StatusCode, err)
				}
				_ = resp.Body.Close()
			}
			b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestDate checks the Date header's value: net/http's format of the
// current second, formatted again when the second it holds has passed.
func TestDate(t *testing.T) {
	// The value of a second that has passed is not reused.
	lastDate.Store(&date{sec: time.Now().Unix() - 1, b: []byte("Thu, 01 Jan 1970 00:00:00 GMT")})
	for attempt := 0; ; attempt++ {
		before := time.Now().UTC().Format(http.TimeFormat)
		got := string(appendDate([]byte("Date: ")))
		again := string(appendDate(nil))
		after := time.Now().UTC().Format(http.TimeFormat)
		if before != after && attempt < 3 {
			continue // a second ended in between: try again
		}
		if got != "Date: "+before || again != before {
			t.Fatalf("appendDate: %q then %q, want %q", got, again, before)
		}
		return
	}
}
