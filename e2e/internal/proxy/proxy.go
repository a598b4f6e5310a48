// Package proxy starts real reverse proxies from Debian (nginx with
// auth_request, Caddy with forward_auth, HAProxy with a Lua check) on a free
// loopback port, configured to ask nexus' HTTP listener before passing a
// request to an upstream. It is a test helper for the end-to-end tests.
//
//	p := proxy.Start(t, proxy.Config{Kind: proxy.Nginx, Nexus: "127.0.0.1:8181", Upstream: up, Users: []string{"alice"}})
//	req, _ := http.NewRequest("GET", p.URL+"/api/files/1", nil)
//	req.SetBasicAuth("alice", proxy.Password)
//
// The templates under templates/ show the directives a user needs in front
// of nexus (who the user is, the check, fail closed, the headers passed
// upstream); their process settings (daemon off, single process, files in
// a temporary folder) and their user lists are for tests.
//
// # Identity
//
// Each proxy authenticates the user itself (HTTP basic authentication
// against its own user list) and sets SubjectHeader to the user it
// verified, replacing whatever the client sent under that name: nexus runs
// with --trusted-subject-header naming it, so the header must only ever
// carry what the proxy verified.
//
// # Caveats
//
// The proxy binaries come from Debian packages (nginx, caddy, haproxy);
// Start fails the test when one is missing (`make deps` installs them).
// HAProxy needs 2.5 or newer for core.httpclient.
package proxy

import (
	"bytes"
	"context"
	"crypto/sha1"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"
)

// Kind names a proxy.
type Kind string

// The proxies Start knows.
const (
	Nginx   Kind = "nginx"
	Caddy   Kind = "caddy"
	HAProxy Kind = "haproxy"
)

// Kinds lists every Kind, for table tests.
var Kinds = []Kind{Nginx, Caddy, HAProxy}

// Config describes one proxy to start.
type Config struct {
	// Kind is the proxy; required.
	Kind Kind
	// Nexus is host:port of nexus' HTTP listener (forward auth under
	// /ext_authz/); required.
	Nexus string
	// Upstream is host:port of the HTTP server requests go to when allowed;
	// required.
	Upstream string
	// UpstreamHeaders are the headers of nexus' allow answer that are copied
	// to the upstream request (a client's own copies are dropped). Empty
	// means none.
	UpstreamHeaders []string
	// Users are the accounts the proxy authenticates, each with the
	// password Password. Required.
	Users []string
	// SubjectHeader is the request header the proxy sets to the user it
	// authenticated, for nexus (--trusted-subject-header) and the upstream;
	// a client's own copy never passes. "" means "X-User".
	SubjectHeader string
	// StartTimeout bounds the wait for the proxy to accept connections.
	// Zero means 15 seconds.
	StartTimeout time.Duration
}

// Validate fills defaults and rejects an incomplete Config.
func (c *Config) Validate() error {
	switch c.Kind {
	case Nginx, Caddy, HAProxy:
	default:
		return fmt.Errorf("proxy: unknown kind %q", c.Kind)
	}
	if c.Nexus == "" || c.Upstream == "" {
		return errors.New("proxy: Nexus and Upstream are required")
	}
	if c.SubjectHeader == "" {
		c.SubjectHeader = "X-User"
	}
	for _, h := range append([]string{c.SubjectHeader}, c.UpstreamHeaders...) {
		if h == "" || strings.ContainsAny(h, " \t:;{}\"'$") {
			return fmt.Errorf("proxy: bad header name %q", h)
		}
	}
	if len(c.Users) == 0 {
		return errors.New("proxy: at least one user is required")
	}
	for _, u := range c.Users {
		if u == "" || strings.ContainsAny(u, " \t\r\n:;{}\"'$#\\") {
			return fmt.Errorf("proxy: bad user name %q", u)
		}
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 15 * time.Second
	}
	return nil
}

// Proxy is a running proxy.
type Proxy struct {
	// Addr is the loopback host:port the proxy listens on.
	Addr string
	// URL is "http://" + Addr.
	URL string
	// Dir holds the rendered configuration and the proxy's files.
	Dir string

	cmd    *exec.Cmd
	done   chan struct{}
	output *lockedBuffer
}

// Output returns what the proxy wrote to stdout and stderr so far.
func (p *Proxy) Output() string { return p.output.String() }

//go:embed templates
var templates embed.FS

// Password is the password of every user of Config.Users.
const Password = "nexus-e2e"

// passwordBcrypt is Password hashed with bcrypt (cost 10) and encoded in
// base64, as Caddy's basicauth takes it.
const passwordBcrypt = "JDJhJDEwJGVKUTB4cVp0MFpWQVRLeFZ5djd5Vy5XeTRvMVhLS3J5S1FxNVJCaGZHUWllYXphSmVlYjRX"

// htpasswd is an nginx auth_basic_user_file for users, each with
// Password ({SHA} scheme: base64 of SHA-1, which nginx reads natively).
func htpasswd(users []string) []byte {
	sum := sha1.Sum([]byte(Password))
	hash := "{SHA}" + base64.StdEncoding.EncodeToString(sum[:])
	var b bytes.Buffer
	for _, u := range users {
		fmt.Fprintf(&b, "%s:%s\n", u, hash)
	}
	return b.Bytes()
}

var funcs = template.FuncMap{
	"join": strings.Join,
	// password is Password: HAProxy's userlist reads it in clear
	// (insecure-password), which is fine for a test.
	"password":       func() string { return Password },
	"passwordBcrypt": func() string { return passwordBcrypt },
	// lowerUnderscore turns a header name into nginx's variable suffix.
	"lowerUnderscore": func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") },
}

// Render returns the configuration files of cfg for a proxy listening on
// listen with its files under dir, by file name.
func Render(cfg Config, listen, dir string) (map[string][]byte, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	data := struct {
		Config
		Listen, Dir string
	}{cfg, listen, dir}
	names := map[Kind][]string{
		Nginx:   {"nginx.conf.tmpl"},
		Caddy:   {"Caddyfile.tmpl"},
		HAProxy: {"haproxy.cfg.tmpl", "nexus_auth.lua"},
	}[cfg.Kind]
	out := map[string][]byte{}
	for _, n := range names {
		src, err := templates.ReadFile("templates/" + n)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(n, ".tmpl")
		if !strings.HasSuffix(n, ".tmpl") {
			out[name] = src
			continue
		}
		tm, err := template.New(n).Funcs(funcs).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("proxy: template %s: %w", n, err)
		}
		var b bytes.Buffer
		if err := tm.Execute(&b, data); err != nil {
			return nil, fmt.Errorf("proxy: template %s: %w", n, err)
		}
		out[name] = b.Bytes()
	}
	if cfg.Kind == Nginx {
		out["htpasswd"] = htpasswd(cfg.Users)
	}
	return out, nil
}

// Binary returns the path of kind's program, looking in PATH and /usr/sbin.
func Binary(kind Kind) (string, error) {
	if p, err := exec.LookPath(string(kind)); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", string(kind))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("proxy: %s is not installed (make deps installs it)", kind)
}

// Start renders cfg, starts the proxy on a free loopback port and waits until
// it accepts connections. The proxy is stopped when the test ends. A proxy
// that cannot start fails the test with its output.
func Start(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bin, err := Binary(cfg.Kind)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	// The port is free when chosen, but another process may take it before
	// the proxy binds: try again with a new port.
	for range 3 {
		p, err := start(t, bin, cfg)
		if err == nil {
			return p
		}
		lastErr = err
	}
	t.Fatalf("proxy %s: %v", cfg.Kind, lastErr)
	return nil
}

func start(t testing.TB, bin string, cfg Config) (*Proxy, error) {
	t.Helper()
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	files, err := Render(cfg, addr, dir)
	if err != nil {
		return nil, err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	var args []string
	switch cfg.Kind {
	case Nginx:
		args = []string{"-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", "stderr"}
	case Caddy:
		args = []string{"run", "--config", filepath.Join(dir, "Caddyfile"), "--adapter", "caddyfile"}
	case HAProxy:
		args = []string{"-db", "-f", filepath.Join(dir, "haproxy.cfg")}
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	// Caddy keeps state under HOME and XDG folders: keep it in dir.
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proxy{Addr: addr, URL: "http://" + addr, Dir: dir, cmd: cmd, done: make(chan struct{}), output: out}
	go func() { _ = cmd.Wait(); close(p.done) }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.StartTimeout)
	defer cancel()
	if err := waitListening(ctx, addr, p.done); err != nil {
		stop()
		return nil, fmt.Errorf("%w\n%s", err, out.String())
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", cfg.Kind, out.String())
		}
	})
	return p, nil
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port free right now.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening waits until addr accepts TCP connections, the process
// exits, or ctx ends. A proxy binds its port only after it has loaded its
// configuration.
func waitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("the proxy exited before it listened")
		case <-ctx.Done():
			return fmt.Errorf("the proxy did not listen on %s: %w", addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the two writers of a process.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
