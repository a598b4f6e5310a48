package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessConfig starts `nexus serve` as a child process.
type ProcessConfig struct {
	// Exe is the nexus binary.
	Exe string
	// Args are the serve flags after the listener flags (which are set
	// to loopback port 0): --data-dir, --schema, --policy, ...
	Args []string
	// Log receives the server's stderr; nil discards it.
	Log io.Writer
	// Ready bounds the wait for "nexus ready"; zero means 10 minutes.
	Ready time.Duration
}

type process struct {
	cmd               *exec.Cmd
	grpc, http, admin string
	done              chan struct{}
	waitErr           error
	stopOnce          sync.Once
	stopErr           error
}

var _ Server = (*process)(nil)

func (p *process) GRPCAddr() string   { return p.grpc }
func (p *process) HTTPAddr() string   { return p.http }
func (p *process) MetricsURL() string { return "http://" + p.admin + "/metrics" }

// PID is the server's process ID.
func (p *process) PID() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and waits (killing after 15 s).
func (p *process) Stop(ctx context.Context) error {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		case <-ctx.Done():
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		var ee *exec.ExitError
		if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
			p.stopErr = p.waitErr
		}
	})
	return p.stopErr
}

// StartProcess runs `Exe serve` on loopback ports chosen by the kernel
// and returns once the server logs that it is ready.
func StartProcess(ctx context.Context, cfg ProcessConfig) (Server, error) {
	if cfg.Ready == 0 {
		cfg.Ready = 10 * time.Minute
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	// The load generator stands for the applications: it sends no API key.
	args := append([]string{"serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--app-api-insecure"}, cfg.Args...)
	cmd := exec.Command(cfg.Exe, args...)
	cmd.Stdout = logw
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %s: %w", cfg.Exe, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logw, line)
			if signalled {
				continue
			}
			if strings.Contains(line, "msg=listening") {
				var name, addr string
				for _, f := range strings.Fields(line) {
					if v, ok := strings.CutPrefix(f, "listener="); ok {
						name = v
					}
					if v, ok := strings.CutPrefix(f, "addr="); ok {
						addr = v
					}
				}
				switch name {
				case "grpc":
					p.grpc = addr
				case "http":
					p.http = addr
				case "admin":
					p.admin = addr
				}
			}
			if strings.Contains(line, `msg="nexus ready"`) {
				signalled = true
				ready <- nil
			}
		}
		if !signalled {
			ready <- errors.New("the server exited before it was ready")
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	select {
	case err := <-ready:
		if err != nil {
			<-p.done
			return nil, fmt.Errorf("bench: %s serve: %w (%v)", cfg.Exe, err, p.waitErr)
		}
	case <-time.After(cfg.Ready):
		_ = p.Stop(ctx)
		return nil, fmt.Errorf("bench: %s serve: not ready after %v", cfg.Exe, cfg.Ready)
	case <-ctx.Done():
		_ = p.Stop(context.WithoutCancel(ctx))
		return nil, ctx.Err()
	}
	if p.grpc == "" || p.http == "" || p.admin == "" {
		_ = p.Stop(ctx)
		return nil, fmt.Errorf("bench: the server did not log its listener addresses")
	}
	return p, nil
}

// WriteAllowAll writes the allow-only policy (allowall/, a copy of the
// product's defaults/allowall) into dir
// and returns dir, for `nexus serve --policy dir`.
func WriteAllowAll(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	err := fs.WalkDir(allowAll, "allowall", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := allowAll.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644)
	})
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	return dir, nil
}
