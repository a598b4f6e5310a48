// Package freeport chooses loopback TCP ports for tests and benchmarks
// that must name a port before the process listening on it starts (a NATS
// cluster's routes, a peer PDP's flags).
//
// A port the kernel hands out for 127.0.0.1:0 comes from its ephemeral
// range, the same range it takes source ports from for outgoing
// connections, so between the choice and the bind any client on the
// machine may take it. Ports are therefore chosen at random below that
// range, where only another explicit bind can take them.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor is the lowest port chosen: below it live well-known services.
const floor = 10000

// Ports returns n distinct loopback ports that were free a moment ago.
func Ports(n int) ([]int, error) {
	top := ephemeralLow()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if top > floor+n && tries < 100*n {
			addr = "127.0.0.1:" + strconv.Itoa(floor+rand.IntN(top-floor))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, fmt.Errorf("freeport: %w", err)
			}
			continue // taken: try another
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Addr returns one loopback address whose port was free a moment ago.
func Addr() (string, error) {
	p, err := Ports(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p[0]), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0
// where it cannot be read (then the kernel chooses).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
