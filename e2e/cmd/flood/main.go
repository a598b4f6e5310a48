// Command flood holds what a hostile client may hold of a nexus server, to
// measure the server's memory under it: gRPC streams that never send
// their message, or idle TCP connections.
//
//	flood -grpc 127.0.0.1:9191 -conns 1000 -streams 100 -hold 20s -pid PID
//	flood -idle 127.0.0.1:8181 -conns 15000 -hold 20s -pid PID
//
// With -pid it prints the server's resident memory (VmRSS) before, while
// held, and after the flood lets go.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	grpcAddr := flag.String("grpc", "", "gRPC address: open streams that never send their message")
	idleAddr := flag.String("idle", "", "TCP address: open connections that send nothing")
	conns := flag.Int("conns", 100, "connections")
	streams := flag.Int("streams", 100, "streams per gRPC connection")
	hold := flag.Duration("hold", 20*time.Second, "how long to hold them")
	pid := flag.Int("pid", 0, "server process whose VmRSS to print")
	flag.Parse()
	fmt.Printf("rss before: %s\n", rss(*pid))
	ctx, cancel := context.WithCancel(context.Background())
	var opened, refused, otherErr atomic.Int64
	var closers []func()
	switch {
	case *grpcAddr != "":
		desc := &grpc.StreamDesc{StreamName: "Check", ServerStreams: true, ClientStreams: true}
		method := "/" + authv3.Authorization_ServiceDesc.ServiceName + "/Check"
		var wg sync.WaitGroup
		for range *conns {
			cc, err := grpc.NewClient(*grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				log.Fatal(err)
			}
			closers = append(closers, func() { _ = cc.Close() })
			wg.Go(func() {
				for range *streams {
					s, err := cc.NewStream(ctx, desc, method)
					if err != nil {
						otherErr.Add(1)
						return
					}
					opened.Add(1)
					go func() {
						err := s.RecvMsg(new(authv3.CheckResponse))
						switch status.Code(err) {
						case codes.ResourceExhausted:
							refused.Add(1)
						case codes.Canceled:
						default:
							otherErr.Add(1)
						}
					}()
				}
			})
		}
		wg.Wait()
	case *idleAddr != "":
		for range *conns {
			c, err := net.DialTimeout("tcp", *idleAddr, 2*time.Second)
			if err != nil {
				otherErr.Add(1)
				break
			}
			opened.Add(1)
			closers = append(closers, func() { _ = c.Close() })
		}
	default:
		log.Fatal("flood: -grpc or -idle")
	}
	time.Sleep(*hold)
	fmt.Printf("opened %d, refused RESOURCE_EXHAUSTED %d, other errors %d\nrss held: %s\n", opened.Load(), refused.Load(), otherErr.Load(), rss(*pid))
	cancel()
	for _, c := range closers {
		c()
	}
	time.Sleep(5 * time.Second)
	fmt.Printf("rss 5 s after: %s\n", rss(*pid))
}

func rss(pid int) string {
	if pid == 0 {
		return "-"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return "?"
}
