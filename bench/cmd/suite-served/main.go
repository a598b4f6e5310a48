// Command suite-served drives one served PDP with one request for a while and
// prints one line: the target, checks per second, median and 99th
// percentile latency, and the server's CPU per check (from
// /proc/PID/stat). It drives nexus' ext_authz gRPC API (-grpc, with a
// CheckRequest in protojson) or OPA's REST data API (-rest, with a body
// {"input": ...}). scripts/bench-suite-served.sh runs it.
//
//	go run ./cmd/suite-served -grpc 127.0.0.1:9191 -body req.json -pid 1234
//	go run ./cmd/suite-served -rest http://127.0.0.1:8181/v1/data/envoy/authz/allow -body input.json -pid 1235
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

func main() {
	grpcAddr := flag.String("grpc", "", "nexus ext_authz gRPC address")
	rest := flag.String("rest", "", "OPA REST decision URL")
	body := flag.String("body", "", "the request: a CheckRequest in protojson (-grpc) or {\"input\": ...} (-rest)")
	pid := flag.Int("pid", 0, "server process whose CPU time is counted")
	conns := flag.Int("c", 4, "clients at once")
	dur := flag.Duration("d", 5*time.Second, "how long to measure")
	warm := flag.Duration("warmup", time.Second, "how long to run before measuring")
	name := flag.String("name", "", "label of the output line")
	flag.Parse()
	if err := run(*grpcAddr, *rest, *body, *pid, *conns, *dur, *warm, *name); err != nil {
		fmt.Fprintln(os.Stderr, "suite-served:", err)
		os.Exit(1)
	}
}

func run(grpcAddr, rest, bodyFile string, pid, conns int, dur, warm time.Duration, name string) error {
	raw, err := os.ReadFile(bodyFile)
	if err != nil {
		return err
	}
	var check func(context.Context) error
	switch {
	case grpcAddr != "":
		req := &authv3.CheckRequest{}
		if err := protojson.Unmarshal(raw, req); err != nil {
			return fmt.Errorf("%s: %w", bodyFile, err)
		}
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		client := authv3.NewAuthorizationClient(conn)
		check = func(ctx context.Context) error {
			_, err := client.Check(ctx, req)
			return err
		}
	case rest != "":
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}
		check = func(ctx context.Context) error {
			r, err := http.NewRequestWithContext(ctx, http.MethodPost, rest, bytes.NewReader(raw))
			if err != nil {
				return err
			}
			r.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(r)
			if err != nil {
				return err
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"result"`)) {
				return fmt.Errorf("OPA answers %d %s", resp.StatusCode, b)
			}
			return nil
		}
	default:
		return fmt.Errorf("-grpc or -rest is required")
	}
	ctx := context.Background()
	if err := check(ctx); err != nil {
		return err
	}

	var (
		mu        sync.Mutex
		lat       []time.Duration
		firstErr  error
		measuring = make(chan struct{})
	)
	stop := time.Now().Add(warm + dur)
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			on := false
			for time.Now().Before(stop) {
				if !on {
					select {
					case <-measuring:
						on = true
					default:
					}
				}
				t0 := time.Now()
				if err := check(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if on {
					mine = append(mine, time.Since(t0))
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(warm)
	cpu0 := cpuTime(pid)
	t0 := time.Now()
	close(measuring)
	wg.Wait()
	elapsed := time.Since(t0)
	cpu := cpuTime(pid) - cpu0
	if firstErr != nil {
		return firstErr
	}
	if len(lat) == 0 {
		return fmt.Errorf("no checks measured")
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
	cpuPer := 0.0
	if pid > 0 {
		cpuPer = float64(cpu.Nanoseconds()) / 1e3 / float64(len(lat))
	}
	fmt.Printf("%s rps=%.0f p50=%.1f p99=%.1f cpu=%.1f n=%d\n", name, float64(len(lat))/elapsed.Seconds(), q(0.5), q(0.99), cpuPer, len(lat))
	return nil
}

// cpuTime is the user and system CPU time of process pid so far (its
// clock ticks taken as 100 a second, as on Linux), 0 without a pid.
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
