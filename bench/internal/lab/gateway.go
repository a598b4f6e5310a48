package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"text/template"
	"time"

	"github.com/nexuspdp/nexus/internal/freeport"
)

// Proxies a gateway run puts in front of nexus.
const (
	ProxyNginx = "nginx"
	ProxyCaddy = "caddy"
)

// GatewayProxies lists them in report order.
var GatewayProxies = []string{ProxyNginx, ProxyCaddy}

// The proxies' configurations for a benchmark: every request is checked
// with the proxy's forward-auth directive against nexus' HTTP listener
// (/ext_authz/) and passed to the upstream when allowed. The load
// generator sets X-User itself, standing for the authentication a real
// deployment puts in the proxy (basic authentication, a verified JWT):
// the run measures the authorization hop, not a password hash.
var proxyConfigs = map[string]string{
	ProxyNginx: `daemon off;
master_process off;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log stderr error;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path {{.Dir}}/client_body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    upstream pdp { server {{.Nexus}}; keepalive 64; }
    upstream app { server {{.Upstream}}; keepalive 64; }
    server {
        listen {{.Listen}};
        location / {
            auth_request /_auth;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://app;
        }
        location = /_auth {
            internal;
            proxy_pass http://pdp/ext_authz$request_uri;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`,
	ProxyCaddy: `{
	admin off
	auto_https off
}
http://{{.Listen}} {
	route {
		forward_auth {{.Nexus}} {
			uri /ext_authz/
		}
		reverse_proxy {{.Upstream}}
	}
}
`,
}

// ProxyConfig starts a proxy in front of nexus.
type ProxyConfig struct {
	// Kind is ProxyNginx or ProxyCaddy.
	Kind string
	// Nexus is host:port of nexus' HTTP listener; Upstream the server
	// requests go to when allowed.
	Nexus, Upstream string
	// Dir holds the configuration and the proxy's files.
	Dir string
	// Log receives the proxy's output.
	Log io.Writer
}

// ProxyProcess is a running proxy.
type ProxyProcess struct {
	*Child
	// URL is where it listens.
	URL string
}

// ProxyBinary returns the path of a proxy program: in PATH or /usr/sbin.
func ProxyBinary(kind string) (string, error) {
	if p, err := exec.LookPath(kind); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", kind)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s is not installed (make deps installs it)", ErrConfig, kind)
}

// StartProxy writes the proxy's configuration into cfg.Dir and starts it
// on a free loopback port.
func StartProxy(ctx context.Context, cfg ProxyConfig) (*ProxyProcess, error) {
	src, ok := proxyConfigs[cfg.Kind]
	if !ok {
		return nil, fmt.Errorf("%w: proxy %q: want nginx or caddy", ErrConfig, cfg.Kind)
	}
	bin, err := ProxyBinary(cfg.Kind)
	if err != nil {
		return nil, err
	}
	// The proxy runs in cfg.Dir: the paths it is given must not be
	// relative to this process' directory.
	if cfg.Dir, err = filepath.Abs(cfg.Dir); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var lastErr error
	// A free port may be taken before the proxy binds it: try again.
	for range 3 {
		listen, err := freeport.Addr()
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		data := struct{ Listen, Nexus, Upstream, Dir string }{listen, cfg.Nexus, cfg.Upstream, cfg.Dir}
		if err := template.Must(template.New(cfg.Kind).Parse(src)).Execute(&b, data); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		var args []string
		switch cfg.Kind {
		case ProxyNginx:
			conf := filepath.Join(cfg.Dir, "nginx.conf")
			if err := os.WriteFile(conf, b.Bytes(), 0o644); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			args = []string{"-p", cfg.Dir, "-c", conf, "-e", "stderr"}
		case ProxyCaddy:
			conf := filepath.Join(cfg.Dir, "Caddyfile")
			if err := os.WriteFile(conf, b.Bytes(), 0o644); err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			args = []string{"run", "--config", conf, "--adapter", "caddyfile"}
		}
		c, err := StartChild(ctx, ChildConfig{
			Exe: bin, Args: args, Dir: cfg.Dir, Log: cfg.Log, Ready: "tcp://" + listen, ReadyTimeout: 15 * time.Second,
			// Caddy keeps state under HOME and the XDG folders.
			Env: []string{"HOME=" + cfg.Dir, "XDG_DATA_HOME=" + cfg.Dir, "XDG_CONFIG_HOME=" + cfg.Dir},
		})
		if err == nil {
			return &ProxyProcess{Child: c, URL: "http://" + listen}, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Upstream is a loopback HTTP server that answers every request at once
// with 200 and a two-byte body: the application behind the proxy.
type Upstream struct {
	Addr string
	srv  *http.Server
}

// StartUpstream starts an Upstream on a free loopback port.
func StartUpstream() (*Upstream, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	u := &Upstream{Addr: l.Addr().String(), srv: &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok"))
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}}
	go func() { _ = u.srv.Serve(l) }()
	return u, nil
}

// Close stops the upstream.
func (u *Upstream) Close() error {
	if err := u.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
