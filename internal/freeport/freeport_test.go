package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPorts checks the ports are distinct, below the ephemeral range
// where there is one, and bindable.
func TestPorts(t *testing.T) {
	ports, err := Ports(20)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 20 {
		t.Fatalf("%d ports, want 20", len(ports))
	}
	low := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d twice", p)
		}
		seen[p] = true
		if low > floor+20 && (p < floor || p >= low) {
			t.Errorf("port %d outside [%d, %d)", p, floor, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}

// TestAddrSkipsTaken holds many ports below the range and checks Addr
// never returns one of them.
func TestAddrSkipsTaken(t *testing.T) {
	held, err := Ports(200)
	if err != nil {
		t.Fatal(err)
	}
	var ls []net.Listener
	for _, p := range held {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range 50 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Addr().String() == a {
				t.Fatalf("Addr returned %s, which is held", a)
			}
		}
	}
}
