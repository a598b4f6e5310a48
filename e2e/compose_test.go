package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dockerCompose runs docker compose on envoy/docker-compose.yaml, with env
// added to the environment.
func dockerCompose(ctx context.Context, env []string, args ...string) ([]byte, error) {
	file, err := filepath.Abs(filepath.Join(envoyDir, "docker-compose.yaml"))
	if err != nil {
		return nil, err
	}
	full := append([]string{"compose", "-f", file, "-p", "nexus-e2e"}, args...)
	cmd := exec.CommandContext(ctx, "docker", full...)
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// skipNoted skips t with a one-line reason that shows without -v. go test
// prints a passing package's output only with -v, so besides stderr the
// line goes to the file $NEXUS_TEST_NOTES names, which make test prints
// after the run.
func skipNoted(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf("%s skipped: %s", t.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintln(os.Stderr, line)
	if p := os.Getenv("NEXUS_TEST_NOTES"); p != "" {
		if f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
	t.Skip(line)
}

// composeReady skips t unless a Docker engine with the compose plugin runs
// here.
func composeReady(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		skipNoted(t, "no docker client on PATH")
	}
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err != nil {
		skipNoted(t, "no docker compose plugin (docker compose version fails)")
	}
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		skipNoted(t, "no Docker engine: %s", lastLine(out))
	}
}

// composeRequest is one request through Envoy and what must come back.
type composeRequest struct {
	name     string
	method   string
	path     string
	user     string // a demo token's user; "" sends no token
	token    string // a token as is, instead of user's
	header   string // a client-sent x-user
	spoof    string // a client-sent x-nexus-decision
	want     int
	decision string // x-nexus-decision the upstream must see on an allow
}

// TestComposeEnvoy brings up envoy/docker-compose.yaml (Envoy, nexus built
// from envoy/Dockerfile, the echo upstream, and Envoy with the edge filter)
// and sends requests through Envoy as users would, with the demo JWTs of
// envoy/demo-tokens: over gRPC and then HTTP ext_authz an allow, a deny, a
// JWT-identified request, a forged identity header and a broken token; on
// the edge filter's Envoy a request the filter allows itself and one it
// passes on to nexus. It skips, with a line that make test prints, where no
// Docker engine runs or the base images cannot be pulled.
func TestComposeEnvoy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	composeReady(t, ctx)
	profile := []string{"--profile", "wasm"}
	if out, err := dockerCompose(ctx, nil, append(profile, "pull", "--ignore-buildable")...); err != nil {
		skipNoted(t, "images cannot be pulled: %s", lastLine(out))
	}
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancelBuild()
	if out, err := dockerCompose(buildCtx, nil, append(profile, "build")...); err != nil {
		t.Fatalf("docker compose build: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := dockerCompose(ctx, nil, append(profile, "down", "-v", "--remove-orphans")...); err != nil {
			t.Logf("docker compose down: %v\n%s", err, out)
		}
	})
	if out, err := dockerCompose(ctx, nil, append(profile, "up", "-d")...); err != nil {
		t.Fatalf("docker compose up: %v\n%s", err, out)
	}
	tokens := demoTokens(t)
	alice := tokens["alice"]
	broken := alice[:len(alice)-4] + "AAAA"

	checked := []composeRequest{
		{name: "unchecked health route", method: "GET", path: "/healthz", want: 200},
		{name: "no token", method: "GET", path: "/files/report.pdf", want: 401},
		{name: "JWT-identified ReBAC allow", method: "GET", path: "/files/report.pdf", user: "bob", want: 200, decision: "rebac"},
		{name: "JWT-identified RBAC allow", method: "DELETE", path: "/tenants/acme/folders/q3", user: "alice", want: 200, decision: "rbac"},
		{name: "deny", method: "PUT", path: "/files/report.pdf", user: "bob", want: 403},
		{name: "forged x-user without a token", method: "DELETE", path: "/tenants/acme/folders/q3", header: "alice", want: 401},
		{name: "forged x-user next to a token", method: "DELETE", path: "/tenants/acme/folders/q3", user: "carol", header: "alice", want: 403},
		{name: "broken token", method: "GET", path: "/files/report.pdf", token: broken, want: 401},
	}
	for _, cfg := range []string{"envoy-ext-authz-grpc.yaml", "envoy-ext-authz-http.yaml"} {
		t.Run(cfg, func(t *testing.T) {
			if out, err := dockerCompose(ctx, []string{"NEXUS_ENVOY_CONFIG=" + cfg}, "up", "-d", "envoy"); err != nil {
				t.Fatalf("docker compose up envoy: %v\n%s", err, out)
			}
			waitHealthy(t, ctx, "http://127.0.0.1:10000")
			for _, rq := range checked {
				t.Run(rq.name, func(t *testing.T) {
					composeDo(t, "http://127.0.0.1:10000", tokens, rq)
				})
			}
		})
	}

	t.Run("edge filter", func(t *testing.T) {
		base := "http://127.0.0.1:10001"
		waitHealthy(t, ctx, base)
		// The filter answers once its first snapshot arrived (it polls
		// every 5 s); until then it passes everything on to ext_authz.
		allow := composeRequest{name: "allowed by the edge filter", method: "GET", path: "/tenants/acme/files/report.pdf", user: "alice", want: 200, decision: "edge-allow"}
		deadline := time.Now().Add(45 * time.Second)
		for {
			_, decision, err := composeSend(base, tokens, allow)
			if err == nil && decision == "edge-allow" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no edge-allow after 45s (last decision %q, err %v)\n%s", decision, err, composeLogs(ctx))
			}
			time.Sleep(time.Second)
		}
		for _, rq := range []composeRequest{
			allow,
			// bob holds no tenant role, so the snapshot does not know him:
			// the filter passes the request on, and nexus allows it
			// (ReBAC).
			{name: "passed on to nexus", method: "GET", path: "/tenants/acme/files/report.pdf", user: "bob", want: 200, decision: "rebac"},
			{name: "forged x-user on the edge", method: "GET", path: "/tenants/acme/files/report.pdf", header: "alice", want: 401},
			// A client's own edge-allow does not skip ext_authz.
			{name: "forged edge decision", method: "GET", path: "/files/report.pdf", header: "alice", spoof: "edge-allow", want: 401},
		} {
			t.Run(rq.name, func(t *testing.T) {
				composeDo(t, base, tokens, rq)
			})
		}
	})
}

// composeSend sends rq and returns the status and the x-nexus-decision the
// upstream (traefik/whoami, which echoes the request) saw.
func composeSend(base string, tokens map[string]string, rq composeRequest) (int, string, error) {
	req, err := http.NewRequest(rq.method, base+rq.path, nil)
	if err != nil {
		return 0, "", err
	}
	tok := rq.token
	if rq.user != "" {
		tok = tokens[rq.user]
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if rq.header != "" {
		req.Header.Set("X-User", rq.header)
	}
	if rq.spoof != "" {
		req.Header.Set("X-Nexus-Decision", rq.spoof)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	decision := ""
	for _, line := range strings.Split(string(body), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && strings.EqualFold(k, "X-Nexus-Decision") {
			decision = strings.TrimSpace(v)
		}
	}
	return resp.StatusCode, decision, nil
}

func composeDo(t *testing.T, base string, tokens map[string]string, rq composeRequest) {
	t.Helper()
	status, decision, err := composeSend(base, tokens, rq)
	if err != nil {
		t.Fatal(err)
	}
	if status != rq.want {
		t.Fatalf("%s %s: %d, want %d", rq.method, rq.path, status, rq.want)
	}
	if rq.decision != "" && decision != rq.decision {
		t.Fatalf("%s %s: the upstream saw x-nexus-decision %q, want %q", rq.method, rq.path, decision, rq.decision)
	}
}

// waitHealthy waits until GET /healthz through the Envoy at base answers
// 200: Envoy and nexus take a few seconds to start and pass health checks.
func waitHealthy(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		resp, err := client.Get(base + "/healthz")
		if err != nil {
			last = err.Error()
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		last = resp.Status
	}
	t.Fatalf("GET %s/healthz: %s\n%s", base, last, composeLogs(ctx))
}

func composeLogs(ctx context.Context) string {
	out, _ := dockerCompose(ctx, nil, "--profile", "wasm", "logs", "--no-color", "--tail", "50")
	return string(out)
}

// lastLine returns the last line of a command's output, where docker puts
// its error.
func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no output"
	}
	return fmt.Sprintf("%.200s", s)
}

// TestComposeConfig has docker compose itself validate the compose file
// against the Compose specification, where the compose plugin is installed
// (it needs no engine).
func TestComposeConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := exec.LookPath("docker"); err != nil {
		skipNoted(t, "no docker client on PATH")
	}
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err != nil {
		skipNoted(t, "no docker compose plugin (docker compose version fails)")
	}
	if out, err := dockerCompose(ctx, nil, "--profile", "wasm", "config", "--quiet"); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
}
