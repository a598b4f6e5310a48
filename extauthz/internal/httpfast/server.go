// Package httpfast serves the common shape of a plain-text HTTP/1.1 check
// request with less work per request than net/http, and hands every
// connection that sends anything else to a net/http server.
//
// A proxy that asks nexus for a decision sends small keep-alive requests
// of one shape: a request line, a handful of headers, at most a body of
// known length. For those, net/http's per-request machinery (a context
// and a goroutine that watch the connection, a buffered writer per
// response, the header map copied when the status is written) costs more
// CPU than the decision itself. A Server reads such a request itself,
// builds the *http.Request net/http would build for it, calls the handler
// its caller routes it to (the one net/http's handler would call) and
// writes what net/http would write.
//
// Everything else goes to net/http with the connection: a request line
// or a header outside a strict subset (a path the caller does not route,
// HEAD, CONNECT, HTTP/1.0, absolute-form
// targets, a byte outside printable ASCII, obs-fold, a bare LF, a
// Transfer-Encoding, Expect, Upgrade, Trailer, Pragma, a second Host or
// Content-Length, a head over the read buffer) makes the Server hand the
// connection over, with the bytes it has read, to a net/http server that
// serves it from then on. So the Server never answers what it did not
// understand: net/http decides, with its own errors. Only the fast path's
// subset has to agree with net/http, and the tests hold it to net/http's
// answers to the same bytes.
//
// One difference is kept: net/http cancels a request's context when it
// reads the end of the client's stream while the handler runs; the Server
// cancels it when the handler returns (a check takes microseconds, and
// waiting for a revision is bounded), so it does not read ahead.
package httpfast

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves the check requests of a plain-text listener.
type Server struct {
	// Fallback serves the connections the Server hands over. Its Serve
	// runs on a listener of those connections, started by Serve.
	Fallback *http.Server
	// Route chooses the handler of a request for path with method, one
	// the Server reads itself (the checks' paths), and the pattern it
	// sets as the request's Pattern (as ServeMux would; "" for none). A
	// nil handler hands the connection to Fallback. A handler should
	// answer as Fallback's Handler answers the same request.
	Route func(method, path string) (h http.Handler, pattern string)
	// MaxBodyBytes is the largest Content-Length the Server reads itself
	// (at most 64 KiB); a larger body's connection goes to Fallback, so a
	// handler's limit is met by net/http. Zero means 64 KiB.
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds the time from a request's first byte to
	// the end of its head; the connection is closed when it passes.
	ReadHeaderTimeout time.Duration
	// Log receives handler panics; nil means slog.Default().
	Log *slog.Logger

	// closing is set when Shutdown or Close begins; every request reads it.
	closing  atomic.Bool
	mu       sync.Mutex
	conns    map[*conn]struct{}
	handoff  *handoffListener
	listener net.Listener
}

// Serve accepts connections on l until Shutdown or an accept error; it
// serves those it hands over on Fallback. It returns http.ErrServerClosed
// after Shutdown.
func (s *Server) Serve(l net.Listener) error {
	defer l.Close()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listener = l
	s.handoff = &handoffListener{addr: l.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.conns = make(map[*conn]struct{})
	s.mu.Unlock()
	fallback := make(chan error, 1)
	go func() { fallback <- s.Fallback.Serve(s.handoff) }()
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			s.handoff.close()
			<-fallback
			return err
		}
		c := &conn{s: s, nc: nc}
		if !s.track(c, true) {
			_ = nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

// track adds c to (or removes it from) the connections Shutdown waits
// for; adding fails once Shutdown has begun.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// Shutdown stops accepting, closes idle connections, lets requests in
// progress finish until ctx ends (then closes their connections), and
// shuts Fallback down with ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	l := s.listener
	s.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	// Connections handed over meanwhile still reach Fallback, whose
	// Shutdown then closes the hand-over listener and waits for them.
	err := s.drain(ctx)
	return errors.Join(err, s.Fallback.Shutdown(ctx))
}

// drain closes idle connections until none is left, and every connection
// when ctx ends.
func (s *Server) drain(ctx context.Context) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		for c := range s.conns {
			c.closeIfIdle()
		}
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			s.mu.Lock()
			for c := range s.conns {
				_ = c.nc.Close()
			}
			s.mu.Unlock()
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// log is the Server's logger.
func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Close closes the listener, every connection and Fallback at once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closing.Store(true)
	l, h := s.listener, s.handoff
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
	if h != nil {
		h.close()
	}
	return s.Fallback.Close()
}

// handoffListener is the listener Fallback serves: the connections the
// Server hands over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// give hands c to Fallback; false when the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) close()         { l.once.Do(func() { close(l.done) }) }
func (l *handoffListener) Close() error   { l.close(); return nil }
func (l *handoffListener) Addr() net.Addr { return l.addr }

// prefixConn is a connection handed over with the bytes already read from
// it, which its first reads return.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
