package bench

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// TestStartProxyRelativeDir: a proxy started in a directory named
// relatively (as `make bench` names bench-out) finds its configuration;
// it runs in that directory, so a relative path would be doubled.
func TestStartProxyRelativeDir(t *testing.T) {
	for _, kind := range []string{ProxyNginx, ProxyCaddy} {
		t.Run(kind, func(t *testing.T) {
			if _, err := ProxyBinary(kind); err != nil {
				t.Skip(err)
			}
			t.Chdir(t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p, err := StartProxy(ctx, ProxyConfig{Kind: kind, Nexus: "127.0.0.1:1", Upstream: "127.0.0.1:1", Dir: "out/proxy", Log: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.Stop(ctx) }()
			if _, err := os.Stat("out/proxy"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
