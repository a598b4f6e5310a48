package httpfast

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

const (
	// readBufferSize is the read buffer of a connection, and so the
	// largest request head the Server reads itself.
	readBufferSize = 4096
	// maxHeaders bounds the header lines of a request read here.
	maxHeaders = 64
	// maxDiscard is what is read of a body the handler left unread
	// before the connection is reused (net/http's limit); a longer rest
	// closes the connection.
	maxDiscard = 256 << 10
	// maxBodyBytes bounds the bodies the Server reads itself: check
	// bodies are small.
	maxBodyBytes = 64 << 10
)

// conn is one client connection while the Server serves it.
type conn struct {
	s  *Server
	nc net.Conn
	br *bufio.Reader
	// idle is set while the connection waits for a request's first
	// byte: Shutdown may close it then.
	idle atomic.Bool
	out  []byte
	// handler answers the request being served.
	handler http.Handler
	// deadline is set while a read deadline for the rest of a request
	// head is in force.
	deadline bool
	body     bodyReader
	resp     response
}

// closeIfIdle closes the connection when it waits for a request.
func (c *conn) closeIfIdle() {
	if c.idle.Load() {
		_ = c.nc.Close()
	}
}

// serve reads requests until the connection ends, is handed over, or the
// Server shuts down.
func (c *conn) serve() {
	handedOver := false
	defer func() {
		if err := recover(); err != nil && err != http.ErrAbortHandler {
			c.s.log().Error("http: panic serving a request", "remote", c.nc.RemoteAddr().String(), "panic", err, "stack", string(debug.Stack()))
		}
		if !handedOver {
			_ = c.nc.Close()
		}
		c.s.track(c, false)
	}()
	c.br = bufio.NewReaderSize(c.nc, readBufferSize)
	// The connection's context is never canceled: no request outlives
	// serve, and each request's own context is canceled when its
	// handler returns. A parent without a Done channel makes that
	// per-request context cheap to make and to cancel.
	ctx := context.WithValue(context.Background(), http.ServerContextKey, c.s.Fallback)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.nc.LocalAddr())
	remote := c.nc.RemoteAddr().String()
	// Yielding is cheap with one P. With more, Go wakes a thread for an
	// idle P to run the goroutine that yielded, which costs more than the
	// empty read it saves on a server that is not saturated.
	yield := runtime.GOMAXPROCS(0) == 1
	lastPost := false
	for first := true; ; first = false {
		c.idle.Store(true)
		if c.s.closing.Load() {
			return
		}
		// As net/http: between requests, a connection that ends with
		// fewer than four bytes is closed without an answer.
		n := 4
		if first {
			n = 1
		} else if yield && c.br.Buffered() == 0 {
			// The client sends its next request once it has read this
			// answer. Reading now would mostly find nothing (a system
			// call wasted, then a wait in the poller); under load, the
			// other connections' requests run first, and by then this
			// one's has usually arrived. Idle, this costs a scheduler
			// pass.
			runtime.Gosched()
		}
		start, err := c.br.Peek(n)
		c.idle.Store(false)
		if err != nil {
			return
		}
		if lastPost {
			// As net/http: line ends a client sent after a POST's body
			// (up to the four bytes peeked) are skipped.
			k := 0
			for k < len(start) && (start[k] == '\r' || start[k] == '\n') {
				k++
			}
			_, _ = c.br.Discard(k)
		}
		head, ok, err := c.readHead()
		if err != nil && !errors.Is(err, io.EOF) {
			return // a timeout or a broken connection, closed as net/http closes it
		}
		if !ok || err != nil { // a head outside the subset, or cut short (net/http answers 400)
			handedOver = c.handOver()
			return
		}
		req, ok := c.parse(head)
		if !ok {
			handedOver = c.handOver()
			return
		}
		if c.deadline {
			_ = c.nc.SetReadDeadline(time.Time{})
			c.deadline = false
		}
		_, _ = c.br.Discard(len(head))
		req.RemoteAddr = remote
		lastPost = req.Method == "POST"
		if !c.serveOne(ctx, req) {
			return
		}
	}
}

// handOver gives the connection, with what was read of it, to Fallback.
func (c *conn) handOver() bool {
	_ = c.nc.SetReadDeadline(time.Time{})
	pre, _ := c.br.Peek(c.br.Buffered())
	pc := &prefixConn{Conn: c.nc, pre: bytes.Clone(pre)}
	return c.s.handoff.give(pc)
}

// readHead returns the request head (through its empty line) at the start
// of the buffer, without consuming it. ok is false when the head is not
// one the Server reads: a line not ended by CRLF, an empty first line, or
// a head larger than the buffer. err is a read error (a timeout, the
// client gone) before the head was complete.
func (c *conn) readHead() (head []byte, ok bool, err error) {
	scanned := 0
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		for {
			i := bytes.IndexByte(buf[scanned:], '\n')
			if i < 0 {
				break
			}
			end := scanned + i
			if end == 0 || buf[end-1] != '\r' {
				return nil, false, nil
			}
			if end == scanned+1 {
				if scanned == 0 {
					return nil, false, nil // an empty first line
				}
				return buf[:end+1], true, nil
			}
			scanned = end + 1
		}
		if len(buf) == readBufferSize {
			return nil, false, nil
		}
		// The head's first bytes are in: the rest must follow within
		// ReadHeaderTimeout. A head read whole at once (the usual case)
		// sets no timer.
		if !c.deadline && c.s.ReadHeaderTimeout > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(c.s.ReadHeaderTimeout))
			c.deadline = true
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, false, err
		}
	}
}

// parse builds the request net/http would build from head, or reports
// false for a head outside the subset the Server reads.
func (c *conn) parse(head []byte) (*http.Request, bool) {
	// The request line: METHOD SP origin-form SP HTTP/1.1 CRLF.
	sp := bytes.IndexByte(head, ' ')
	if sp <= 0 {
		return nil, false
	}
	if !httpguts.ValidHeaderFieldName(string(head[:sp])) { // a token, as net/http wants a method
		return nil, false
	}
	method := knownMethod(head[:sp])
	if method == "HEAD" || method == "CONNECT" {
		return nil, false
	}
	if len(head) == sp+1 || head[sp+1] != '/' {
		return nil, false
	}
	// One string holds every string of the request but the method.
	all := string(head[sp+1:])
	path := all
	if q := strings.IndexAny(path, "? \r"); q >= 0 {
		path = path[:q]
	}
	handler, pattern := c.s.Route(method, path)
	if handler == nil {
		return nil, false
	}
	line, rest, _ := strings.Cut(all, "\r\n")
	target, proto, ok := strings.Cut(line, " ")
	if !ok || proto != "HTTP/1.1" {
		return nil, false
	}
	for i := 0; i < len(target); i++ {
		if b := target[i]; b <= ' ' || b >= 0x7f {
			return nil, false
		}
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || u.Host != "" {
		return nil, false
	}

	// The header lines: name ":" OWS value OWS CRLF, printable ASCII.
	// Their values share one backing array, as net/http's do.
	lines := strings.Count(rest, "\r\n") - 1
	if lines > maxHeaders {
		return nil, false
	}
	h := make(http.Header, lines)
	values := make([]string, 0, lines)
	var host string
	hosts, lengths := 0, 0
	contentLength := int64(0)
	close := false
	for len(rest) > len("\r\n") {
		line, rest, _ = strings.Cut(rest, "\r\n")
		name, v, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			return nil, false
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, false
		}
		v = strings.Trim(v, " \t")
		for i := 0; i < len(v); i++ {
			if b := v[i]; (b < ' ' && b != '\t') || b >= 0x7f {
				return nil, false
			}
		}
		key := textproto.CanonicalMIMEHeaderKey(name) // name itself when canonical
		switch key {
		case "Host":
			hosts++
			if hosts > 1 || !httpguts.ValidHostHeader(v) {
				return nil, false
			}
			host = v
			continue // net/http keeps the Host header out of the map
		case "Content-Length":
			lengths++
			n, ok := parseLength(v)
			if lengths > 1 || !ok {
				return nil, false
			}
			contentLength = n
		case "Connection":
			switch {
			case strings.EqualFold(v, "close"):
				close = true
			case strings.EqualFold(v, "keep-alive"):
			default:
				return nil, false
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Trailer", "Te", "Pragma", "Http2-Settings":
			return nil, false
		}
		if vs := h[key]; vs != nil {
			h[key] = append(vs, v)
		} else {
			values = append(values, v)
			h[key] = values[len(values)-1 : len(values) : len(values)]
		}
	}
	if hosts == 0 || contentLength > c.s.maxBody() {
		return nil, false
	}
	req := &http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: contentLength, Host: host, Close: close, RequestURI: target,
		Body: http.NoBody, Pattern: pattern,
	}
	c.handler = handler
	if contentLength > 0 {
		c.body = bodyReader{r: c.br, left: contentLength}
		req.Body = &c.body
	}
	return req, true
}

// serveOne runs the handler for req and writes its response; false when
// the connection is not to be used again.
func (c *conn) serveOne(ctx context.Context, req *http.Request) bool {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req = req.WithContext(rctx)
	w := &c.resp
	w.reset(req)
	c.handler.ServeHTTP(w, req)
	keep := !req.Close
	if req.ContentLength > 0 && !c.body.finish() {
		keep = false
	}
	if c.s.closing.Load() {
		keep = false
	}
	out, ok := w.finish(c.out[:0], keep)
	c.out = out[:0]
	if !ok {
		c.s.log().Error("http: the handler set a framing header the fast path does not write; the connection is closed without an answer",
			"method", req.Method, "path", req.URL.Path)
		return false
	}
	if _, err := c.nc.Write(out); err != nil {
		return false
	}
	return keep
}

// maxBody is the largest body the Server reads itself.
func (s *Server) maxBody() int64 {
	if s.MaxBodyBytes <= 0 || s.MaxBodyBytes > maxBodyBytes {
		return maxBodyBytes
	}
	return s.MaxBodyBytes
}

// bodyReader is a request body of known length read from the connection.
// As net/http's, a body the client ended early reads as
// io.ErrUnexpectedEOF once and io.EOF after; any other read error stays.
type bodyReader struct {
	r      *bufio.Reader
	left   int64
	closed bool
	// sawEOF is set when the client's stream ended, early or not.
	sawEOF bool
	err    error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 || b.sawEOF {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	switch {
	case err == io.EOF:
		b.sawEOF = true
		if b.left > 0 {
			err = io.ErrUnexpectedEOF
		}
	case err != nil:
		b.err = err
	case b.left == 0:
		err = io.EOF
	}
	return n, err
}

func (b *bodyReader) Close() error {
	b.closed = true
	return nil
}

// finish reads what the handler left of the body, up to maxDiscard;
// false when the connection cannot carry another request.
func (b *bodyReader) finish() bool {
	if b.err != nil {
		return false
	}
	if b.left == 0 || b.sawEOF {
		return true // the connection's next read ends it
	}
	if b.left > maxDiscard {
		return false
	}
	n, err := b.r.Discard(int(b.left))
	b.left -= int64(n)
	return err == nil
}

// knownMethod returns the method as a string, without allocating for the
// common ones.
func knownMethod(b []byte) string {
	switch string(b) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "PATCH":
		return "PATCH"
	case "OPTIONS":
		return "OPTIONS"
	case "HEAD":
		return "HEAD"
	}
	return string(b)
}

// parseLength reads a Content-Length of 1 to 18 digits.
func parseLength(v string) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}
