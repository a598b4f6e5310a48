package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dockerCompose runs docker compose on envoy/docker-compose.yaml.
func dockerCompose(ctx context.Context, args ...string) ([]byte, error) {
	file, err := filepath.Abs(filepath.Join(envoyDir, "docker-compose.yaml"))
	if err != nil {
		return nil, err
	}
	full := append([]string{"compose", "-f", file, "-p", "nexus-e2e"}, args...)
	return exec.CommandContext(ctx, "docker", full...).CombinedOutput()
}

// TestComposeEnvoy brings up envoy/docker-compose.yaml (Envoy, nexus built
// from envoy/Dockerfile, the echo upstream) and sends requests through
// Envoy: the unchecked health route reaches the upstream, and a request
// without a subject is denied by nexus' default policy. It skips when no
// Docker engine answers or the base images cannot be pulled.
func TestComposeEnvoy(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker client on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err != nil {
		t.Skip("no docker compose plugin (docker compose version fails)")
	}
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine: %s", lastLine(out))
	}
	if out, err := dockerCompose(ctx, "pull", "--ignore-buildable"); err != nil {
		t.Skipf("images cannot be pulled: %s", lastLine(out))
	}
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelBuild()
	if out, err := dockerCompose(buildCtx, "build"); err != nil {
		t.Fatalf("docker compose build: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := dockerCompose(ctx, "down", "-v", "--remove-orphans"); err != nil {
			t.Logf("docker compose down: %v\n%s", err, out)
		}
	})
	if out, err := dockerCompose(ctx, "up", "-d"); err != nil {
		t.Fatalf("docker compose up: %v\n%s", err, out)
	}

	client := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) (int, error) {
		resp, err := client.Get("http://127.0.0.1:10000" + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Envoy and nexus take a few seconds to start and to pass the health
	// checks.
	var code int
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if code, err = get("/healthz"); err == nil && code == http.StatusOK {
			break
		}
	}
	if code != http.StatusOK {
		logs, _ := dockerCompose(ctx, "logs", "--no-color", "--tail", "50")
		t.Fatalf("GET /healthz through Envoy: %d %v\n%s", code, err, logs)
	}
	tests := []struct {
		name string
		path string
		want int
	}{
		{name: "unchecked health route", path: "/healthz", want: http.StatusOK},
		{name: "no subject is denied", path: "/api/files/1", want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := get(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("GET %s: %d, want %d", tt.path, got, tt.want)
			}
		})
	}
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
		t.Skip("no docker client on PATH")
	}
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err != nil {
		t.Skip("no docker compose plugin (docker compose version fails)")
	}
	if out, err := dockerCompose(ctx, "config", "--quiet"); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
}
