package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// h2conn is a lean gRPC client for one unary method on one HTTP/2
// connection: the request headers are encoded once, a call writes two
// frames into a shared buffer that one writer goroutine flushes (so calls
// in flight share syscalls), and one reader goroutine hands each answer to
// its call. It implements what a unary call needs of HTTP/2 and gRPC
// (flow control both ways, SETTINGS and PING acknowledgements, GOAWAY,
// RST_STREAM, trailers-only errors) and nothing else. On this 2-core
// machine it costs a fraction of grpc-go's client per call, which leaves
// the cores to the server under test.
type h2conn struct {
	conn   net.Conn
	header []byte // HPACK block of the request headers, without state

	mu       sync.Mutex
	cond     *sync.Cond // signalled when the send window grows or the conn fails
	out      []byte     // frames waiting for the writer
	spare    []byte
	wake     chan struct{}
	nextID   uint32
	window   int64 // connection send window
	streamWd int64 // initial send window of a stream (server's setting)
	calls    map[uint32]*h2call
	err      error // set once the connection failed
}

// h2call is one call in flight.
type h2call struct {
	done chan struct{}
	buf  []byte // DATA received
	resp []byte // the response message (buf after the 5-byte prefix)
	code codes.Code
	msg  string
	err  error
}

var h2calls = sync.Pool{New: func() any { return &h2call{done: make(chan struct{}, 1)} }}

// recvWindow is the receive window granted to the server, for the
// connection and for each stream; it is topped up as answers are read.
const recvWindow = 1 << 30

func dialH2(ctx context.Context, addr, method string) (*h2conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", method}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"user-agent", "nexus-bench"},
	} {
		// Never indexed: the block leaves the encoder's table empty, so
		// the same bytes serve every call.
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true}); err != nil {
			conn.Close()
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	c := &h2conn{
		conn: conn, header: hb.Bytes(), wake: make(chan struct{}, 1), nextID: 1,
		window: 65535, streamWd: 65535, calls: map[uint32]*h2call{},
	}
	c.cond = sync.NewCond(&c.mu)
	var pre bytes.Buffer
	pre.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&pre, nil)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow}); err != nil {
		conn.Close()
		return nil, err
	}
	if err := fr.WriteWindowUpdate(0, recvWindow-65535); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := conn.Write(pre.Bytes()); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench: %w", err)
	}
	go c.writeLoop()
	go c.readLoop()
	return c, nil
}

// call sends the gRPC message msg and waits for the answer; its message
// (resp) is valid until the call is released.
func (c *h2conn) call(ctx context.Context, msg []byte) (*h2call, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	n := len(msg)
	size := int64(5 + n)
	cl := h2calls.Get().(*h2call)
	cl.buf, cl.resp, cl.code, cl.msg, cl.err = cl.buf[:0], nil, 0, "", nil
	if size > 16384 {
		h2calls.Put(cl)
		return nil, fmt.Errorf("%w: a request of %d bytes exceeds one HTTP/2 frame", ErrConfig, size)
	}

	c.mu.Lock()
	if c.err == nil && (c.window < size || c.streamWd < size) {
		// Wait for the server's window, or for ctx.
		stop := context.AfterFunc(ctx, func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
		for c.err == nil && ctx.Err() == nil && (c.window < size || c.streamWd < size) {
			c.cond.Wait()
		}
		stop()
	}
	if c.err != nil || ctx.Err() != nil {
		err := c.err
		if err == nil {
			err = status.FromContextError(ctx.Err()).Err()
		}
		c.mu.Unlock()
		h2calls.Put(cl)
		return nil, err
	}
	id := c.nextID
	c.nextID += 2
	c.window -= size
	c.calls[id] = cl
	// HEADERS (END_HEADERS), then DATA (END_STREAM) with the gRPC
	// message prefix: not compressed, length.
	c.out = appendFrameHeader(c.out, len(c.header), http2.FrameHeaders, http2.FlagHeadersEndHeaders, id)
	c.out = append(c.out, c.header...)
	c.out = appendFrameHeader(c.out, int(size), http2.FrameData, http2.FlagDataEndStream, id)
	c.out = append(c.out, 0)
	c.out = binary.BigEndian.AppendUint32(c.out, uint32(n))
	c.out = append(c.out, msg...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}

	select {
	case <-cl.done:
	case <-ctx.Done():
		c.mu.Lock()
		_, pending := c.calls[id]
		delete(c.calls, id)
		c.mu.Unlock()
		if !pending {
			<-cl.done // the reader is handing it over: take it
		}
		h2calls.Put(cl)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if cl.err != nil {
		err := cl.err
		h2calls.Put(cl)
		return nil, err
	}
	if cl.code != codes.OK {
		err := status.Error(cl.code, cl.msg)
		h2calls.Put(cl)
		return nil, err
	}
	return cl, nil
}

func (cl *h2call) release() { h2calls.Put(cl) }

func appendFrameHeader(b []byte, length int, t http2.FrameType, flags http2.Flags, stream uint32) []byte {
	b = append(b, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags))
	return binary.BigEndian.AppendUint32(b, stream)
}

// queue adds a control frame (acknowledgements, window updates).
func (c *h2conn) queue(b []byte) {
	c.mu.Lock()
	c.out = append(c.out, b...)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *h2conn) writeLoop() {
	for range c.wake {
		c.mu.Lock()
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		failed := c.err != nil
		c.mu.Unlock()
		if failed {
			return
		}
		if len(buf) > 0 {
			if _, err := c.conn.Write(buf); err != nil {
				c.fail(fmt.Errorf("bench: write: %w", err))
				return
			}
		}
		c.mu.Lock()
		c.spare = buf[:0]
		c.mu.Unlock()
	}
}

func (c *h2conn) readLoop() {
	fr := http2.NewFramer(nil, bufio.NewReaderSize(c.conn, 64<<10))
	fr.SetReuseFrames() // DATA is copied out before the next frame
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	var consumed int64
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("bench: read: %w", err))
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			_ = f.ForeachSetting(func(s http2.Setting) error {
				if s.ID == http2.SettingInitialWindowSize {
					c.mu.Lock()
					c.streamWd = int64(s.Val)
					c.cond.Broadcast()
					c.mu.Unlock()
				}
				return nil
			})
			c.queue(appendFrameHeader(nil, 0, http2.FrameSettings, http2.FlagSettingsAck, 0))
		case *http2.PingFrame:
			if !f.IsAck() {
				b := appendFrameHeader(nil, 8, http2.FramePing, http2.FlagPingAck, 0)
				c.queue(append(b, f.Data[:]...))
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.mu.Lock()
				c.window += int64(f.Increment)
				c.cond.Broadcast()
				c.mu.Unlock()
			}
		case *http2.DataFrame:
			// Flow control counts the whole payload, padding included.
			if consumed += int64(f.Header().Length); consumed > recvWindow/2 {
				b := appendFrameHeader(nil, 4, http2.FrameWindowUpdate, 0, 0)
				c.queue(binary.BigEndian.AppendUint32(b, uint32(consumed)))
				consumed = 0
			}
			c.mu.Lock()
			if cl := c.calls[f.StreamID]; cl != nil {
				cl.buf = append(cl.buf, f.Data()...)
			}
			c.mu.Unlock()
			if f.StreamEnded() {
				c.finish(f.StreamID, codes.Internal, "stream ended without trailers", nil)
			}
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				continue // response headers; the trailers end the stream
			}
			code, msg := codes.Unknown, "no grpc-status"
			if v := f.PseudoValue("status"); v != "" && v != "200" {
				code, msg = codes.Unavailable, "HTTP status "+v
			}
			for _, h := range f.RegularFields() {
				switch h.Name {
				case "grpc-status":
					if n, err := strconv.Atoi(h.Value); err == nil {
						code, msg = codes.Code(n), ""
					}
				case "grpc-message":
					msg = h.Value
				}
			}
			c.finish(f.StreamID, code, msg, nil)
		case *http2.RSTStreamFrame:
			c.finish(f.StreamID, codes.Unavailable, "stream reset: "+f.ErrCode.String(), nil)
		case *http2.GoAwayFrame:
			c.fail(fmt.Errorf("bench: server sent GOAWAY (%v)", f.ErrCode))
			return
		}
	}
}

// finish completes the call of stream id; the response message is the
// data after its 5-byte prefix.
func (c *h2conn) finish(id uint32, code codes.Code, msg string, err error) {
	c.mu.Lock()
	cl := c.calls[id]
	delete(c.calls, id)
	c.mu.Unlock()
	if cl == nil {
		return
	}
	cl.code, cl.msg, cl.err = code, msg, err
	if code == codes.OK && err == nil {
		if len(cl.buf) < 5 || int(binary.BigEndian.Uint32(cl.buf[1:5])) != len(cl.buf)-5 || cl.buf[0] != 0 {
			cl.err = errors.New("bench: malformed gRPC response message")
		} else {
			cl.resp = cl.buf[5:]
		}
	}
	cl.done <- struct{}{}
}

// fail ends the connection and every call in flight with err.
func (c *h2conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	calls := c.calls
	c.calls = map[uint32]*h2call{}
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, cl := range calls {
		cl.err = err
		cl.done <- struct{}{}
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
	_ = c.conn.Close()
}

func (c *h2conn) close() error {
	c.fail(io.ErrClosedPipe)
	return nil
}
