package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nexuspdp/nexus/e2e/internal/nexusproc"
)

// exhaustedNexus is a nexus started for a test of what clients may hold.
type exhaustedNexus struct {
	liveNexus
	proc *nexusproc.Proc
}

func startExhaustedNexus(t *testing.T, flags ...string) exhaustedNexus {
	t.Helper()
	n := exhaustedNexus{liveNexus: liveNexus{grpc: nexusproc.FreeAddr(t), http: nexusproc.FreeAddr(t), admin: nexusproc.FreeAddr(t)}}
	args := append([]string{"serve",
		"--grpc-addr", n.grpc, "--http-addr", n.http, "--admin-addr", n.admin,
		"--admin-token", adminToken, "--app-api-insecure", "--data-dir", "data"}, flags...)
	n.proc = nexusproc.Start(t, "", n.admin, args...)
	return n
}

// status answers GET url, or -1 when nothing answers within two seconds.
func quickStatus(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return -1
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// rss is the resident memory of pid in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestDescriptorExhaustion: with its file descriptors used up by raw
// connections to the gRPC port, nexus keeps its listeners: the failed
// accepts are logged and retried, and once those connections close the
// HTTP listener answers again (it is not closed for good while /readyz
// says 200).
func TestDescriptorExhaustion(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) is not installed")
	}
	n := startExhaustedNexus(t)
	pid := n.proc.Cmd.Process.Pid
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	limit := len(fds) + 64
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(pid), "--nofile="+strconv.Itoa(limit)+":"+strconv.Itoa(limit)).CombinedOutput(); err != nil {
		t.Skipf("prlimit: %v %s", err, out)
	}
	var conns []net.Conn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
		conns = nil
	}
	t.Cleanup(closeAll)
	for range limit + 100 {
		c, err := net.DialTimeout("tcp", n.grpc, 2*time.Second)
		if err != nil {
			break // the kernel's queue is full too
		}
		conns = append(conns, c)
	}
	// The HTTP listener meets the exhaustion too: its accept fails.
	_ = quickStatus("http://" + n.http + "/readyz")
	closeAll()
	waitFor(t, 20*time.Second, "the HTTP listener to answer again", func() bool {
		return quickStatus("http://"+n.http+"/readyz") == http.StatusOK
	})
	if !strings.Contains(n.proc.Output.String(), "accept failed; retrying") {
		t.Errorf("the failed accepts are not logged:\n%s", n.proc.Output.String())
	}
	if strings.Contains(n.proc.Output.String(), "listener stopped") {
		t.Errorf("a listener stopped for good:\n%s", n.proc.Output.String())
	}
}

// TestStreamFlood: gRPC streams that never send their message are bounded:
// those beyond --grpc-max-streams are refused at once with
// RESOURCE_EXHAUSTED, the server's memory stays bounded, the HTTP
// listener answers throughout, and once the held streams time out
// (--request-timeout) a normal check is answered, the flood still
// connected.
func TestStreamFlood(t *testing.T) {
	n := startExhaustedNexus(t, "--grpc-max-streams", "300", "--request-timeout", "3s")
	pid := n.proc.Cmd.Process.Pid
	before := rss(t, pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "Check", ServerStreams: true, ClientStreams: true}
	method := "/" + authv3.Authorization_ServiceDesc.ServiceName + "/Check"
	refused := make(chan error, 2000)
	const conns, perConn = 10, 100
	for range conns {
		cc, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		for range perConn {
			s, err := cc.NewStream(ctx, desc, method)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				// The header only: the message never comes. A refused
				// stream ends at once.
				refused <- s.RecvMsg(new(authv3.CheckResponse))
			}()
		}
	}
	exhausted := 0
	deadline := time.After(20 * time.Second)
	for exhausted < conns*perConn-300 {
		select {
		case err := <-refused:
			if status.Code(err) == codes.ResourceExhausted {
				exhausted++
			}
		case <-deadline:
			t.Fatalf("only %d of %d streams over the limit refused", exhausted, conns*perConn-300)
		}
	}
	if code := quickStatus("http://" + n.http + "/readyz"); code != http.StatusOK {
		t.Errorf("readyz during the flood: %d", code)
	}
	if grown := rss(t, pid) - before; grown > 256<<20 {
		t.Errorf("the flood grew the server by %d MiB", grown>>20)
	}
	cc, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := authv3.NewAuthorizationClient(cc)
	waitFor(t, 20*time.Second, "a normal check answered while the flood stays connected", func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		resp, err := client.Check(cctx, envoyCheck(t, "GET", "/files/report.pdf", "", ""))
		return err == nil && resp.GetStatus() != nil
	})
}

// TestSlowClientsCutOff: a client that never sends, sends its head or its
// body too slowly, or keeps an idle keep-alive connection, is cut off
// by the HTTP timeouts.
func TestSlowClientsCutOff(t *testing.T) {
	n := startExhaustedNexus(t, "--read-header-timeout", "1s", "--request-timeout", "2s", "--idle-timeout", "2s")
	for _, tt := range []struct {
		name string
		send string
		// answered: the request is whole and answered first; the
		// connection then idles.
		answered bool
	}{
		{name: "silent", send: ""},
		{name: "half a head", send: "GET /readyz HTTP/1.1\r\nHost: pdp\r\n"},
		{name: "half a body", send: "POST /allowed HTTP/1.1\r\nHost: pdp\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"user\":"},
		{name: "idle keep-alive", send: "GET /readyz HTTP/1.1\r\nHost: pdp\r\n\r\n", answered: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", n.http)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tt.send); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			r := bufio.NewReader(c)
			if tt.answered {
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			start := time.Now()
			_, err = io.Copy(io.Discard, r)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection is still open after %v", time.Since(start).Round(time.Second))
			}
		})
	}
}
