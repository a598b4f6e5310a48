package cluster_test

import (
	"net"
	"sync"
	"testing"
)

// stallProxy is a TCP proxy in front of a NATS server that can stall: while
// stalled it accepts connections and reads what clients send but forwards
// nothing either way, as a server stopped with SIGSTOP would; when it
// resumes, what it held goes on to the server, late.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	stalled bool
	resume  chan struct{} // closed when the stall ends
	conns   map[net.Conn]bool
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, resume: make(chan struct{}), conns: map[net.Conn]bool{}}
	close(p.resume)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *stallProxy) handle(c net.Conn) {
	p.gate()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		p.gate() // a close is held like the bytes before it
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}
	go pipe(s, c)
	pipe(c, s)
}

// gate waits while the proxy is stalled.
func (p *stallProxy) gate() {
	p.mu.Lock()
	ch := p.resume
	p.mu.Unlock()
	<-ch
}

// active reports whether any connection is open through the proxy.
func (p *stallProxy) active() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) > 0
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		p.stalled, p.resume = true, make(chan struct{})
	}
}

func (p *stallProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
	}
}

// cut closes every connection through the proxy, as a node that dies.
func (p *stallProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *stallProxy) close() {
	p.unstall()
	_ = p.ln.Close()
	p.cut()
}
