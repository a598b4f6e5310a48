package extauthz_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// faultyListener fails its first fails accepts with err, then accepts;
// once stop is closed, every accept fails with errGone.
type faultyListener struct {
	net.Listener
	fails atomic.Int32
	err   error
	stop  chan struct{}
}

var errGone = errors.New("the listening socket is gone")

func (l *faultyListener) Accept() (net.Conn, error) {
	if l.stop != nil {
		select {
		case <-l.stop:
			return nil, errGone
		default:
		}
	}
	if l.fails.Add(-1) >= 0 {
		return nil, l.err
	}
	if l.stop == nil {
		return l.Listener.Accept()
	}
	// Accept in the background, so closing stop ends the wait.
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Listener.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-l.stop:
		go func() {
			if r := <-ch; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, errGone
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAcceptErrorsBackOff: accepts that fail with EMFILE (the process out
// of file descriptors) are logged and retried; the listener then serves,
// and the server stays ready.
func TestAcceptErrorsBackOff(t *testing.T) {
	var logs fixture.SyncBuffer
	var mu sync.Mutex
	fl := map[string]*faultyListener{}
	ts := newTestServer(t, func(c *testConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		extauthz.WrapListeners(&c.Config, func(name string, l net.Listener) net.Listener {
			f := &faultyListener{Listener: l, err: &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}}
			f.fails.Store(6)
			mu.Lock()
			fl[name] = f
			mu.Unlock()
			return f
		})
	})
	if code, body := get(t, ts.http+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz: %d %s", code, body)
	}
	resp, err := ts.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", "/files/report.pdf", nil))
	if err != nil || resp.GetStatus() == nil {
		t.Fatalf("gRPC check after EMFILE: %v", err)
	}
	if !strings.Contains(logs.String(), "accept failed; retrying") || !strings.Contains(logs.String(), "too many open files") {
		t.Errorf("the failed accepts are not logged:\n%s", logs.String())
	}
	select {
	case err := <-ts.srv.Failed():
		t.Fatalf("a transient accept error stopped a listener: %v", err)
	default:
	}
}

// TestListenerStopNotReady: a listener that stops for good is logged,
// takes /readyz and /health to not ready and gRPC health to NOT_SERVING,
// and Failed delivers it; the other listeners keep serving.
func TestListenerStopNotReady(t *testing.T) {
	var logs fixture.SyncBuffer
	stop := make(chan struct{})
	ts := newTestServer(t, func(c *testConfig) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		extauthz.WrapListeners(&c.Config, func(name string, l net.Listener) net.Listener {
			if name != "admin" {
				return l
			}
			return &faultyListener{Listener: l, stop: stop}
		})
	})
	if code, body := get(t, ts.http+"/readyz"); code != http.StatusOK {
		t.Fatalf("readyz before: %d %s", code, body)
	}
	close(stop)
	select {
	case err := <-ts.srv.Failed():
		if !errors.Is(err, errGone) || !strings.Contains(err.Error(), "admin") {
			t.Errorf("Failed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Failed delivered nothing")
	}
	if code, body := get(t, ts.http+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "admin listener stopped") {
		t.Errorf("readyz after the admin listener stopped: %d %s", code, body)
	}
	if code, body := get(t, ts.http+"/health"); code != http.StatusInternalServerError {
		t.Errorf("health after the admin listener stopped: %d %s", code, body)
	}
	h, err := healthpb.NewHealthClient(ts.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health: %v %v", h.GetStatus(), err)
	}
	if !strings.Contains(logs.String(), "listener stopped") {
		t.Errorf("not logged:\n%s", logs.String())
	}
	if code, _ := get(t, ts.http+"/healthz"); code != http.StatusOK {
		t.Errorf("the HTTP listener stopped serving too: %d", code)
	}
}

// TestGRPCStreamLimit: streams over GRPCMaxStreams are refused at once with
// RESOURCE_EXHAUSTED, and their places come back when the streams end.
func TestGRPCStreamLimit(t *testing.T) {
	ts := newTestServer(t, func(c *testConfig) { c.Limits.GRPCMaxStreams = 3 })
	ctx, cancel := context.WithCancel(context.Background())
	desc := &grpc.StreamDesc{StreamName: "Check", ServerStreams: true, ClientStreams: true}
	method := "/" + authv3.Authorization_ServiceDesc.ServiceName + "/Check"
	for range 3 {
		// A stream whose message never comes holds its place.
		if _, err := ts.conn.NewStream(ctx, desc, method); err != nil {
			t.Fatal(err)
		}
	}
	req := fixture.EnvoyRequest("GET", "/files/report.pdf", nil)
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = ts.grpc.Check(context.Background(), req); status.Code(err) == codes.ResourceExhausted {
			break
		}
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	if ts.srv.StreamsRefused() == 0 {
		t.Error("StreamsRefused counts nothing")
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = ts.grpc.Check(context.Background(), req); err == nil {
			return
		}
	}
	t.Fatalf("the streams' places did not come back: %v", err)
}
