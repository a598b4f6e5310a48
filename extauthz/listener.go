package extauthz

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// guardedListener is a listener whose Accept rides out the errors a busy
// process meets while accepting (out of file descriptors, of memory, of
// buffers): it logs them, at most once a second, and tries again after a
// pause that doubles from 5 ms to 1 s while they last. Only an error that
// will not pass (the listener closed, its descriptor gone) reaches the
// server, which then stops that listener for good.
type guardedListener struct {
	net.Listener
	name string
	log  *slog.Logger
	// sleep waits between attempts; nil means time.Sleep (tests count).
	sleep func(time.Duration)
}

func (l *guardedListener) Accept() (net.Conn, error) {
	var (
		delay   time.Duration
		failed  int
		lastLog time.Time
	)
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if failed > 0 {
				l.log.Info("accepting again", "listener", l.name, "failed_accepts", failed)
			}
			return c, nil
		}
		if !transientAccept(err) {
			return nil, err
		}
		failed++
		if delay == 0 {
			delay = 5 * time.Millisecond
		} else if delay *= 2; delay > time.Second {
			delay = time.Second
		}
		if now := time.Now(); now.Sub(lastLog) >= time.Second {
			lastLog = now
			l.log.Warn("accept failed; retrying", "listener", l.name, "err", err, "retry_in", delay, "failed_accepts", failed)
		}
		if l.sleep != nil {
			l.sleep(delay)
		} else {
			time.Sleep(delay)
		}
	}
}

// transientAccept reports whether an accept error passes by itself: the
// process or system is out of descriptors, memory or buffers, or a
// connection went away before it was accepted.
func transientAccept(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// streamLimit bounds the gRPC streams in flight on a server, across its
// connections: a stream beyond max is refused at once with
// RESOURCE_EXHAUSTED, before a goroutine or buffer is spent on it. A
// stream that names no deadline gets timeout, so one whose message never
// comes does not hold its place for ever.
type streamLimit struct {
	max     int64
	timeout time.Duration
	n       atomic.Int64
	refused atomic.Int64
}

// tap is the server's InTapHandle. It runs under the connection's lock
// and does no I/O. The stream's context ends when the stream does, for
// any reason, which gives its place back.
func (sl *streamLimit) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if sl.n.Add(1) > sl.max {
		sl.n.Add(-1)
		sl.refused.Add(1)
		return nil, errStreamLimit
	}
	if _, ok := ctx.Deadline(); !ok && sl.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sl.timeout)
		context.AfterFunc(ctx, func() { sl.n.Add(-1); cancel() })
		return ctx, nil
	}
	context.AfterFunc(ctx, func() { sl.n.Add(-1) })
	return ctx, nil
}

// errStreamLimit refuses a stream over Limits.GRPCMaxStreams.
var errStreamLimit = status.Error(codes.ResourceExhausted, "nexus: too many gRPC streams in flight; retry later")
