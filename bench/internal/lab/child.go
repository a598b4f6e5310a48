package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ChildConfig starts a server program (a peer, a proxy, an upstream) as a
// child process.
type ChildConfig struct {
	// Exe and Args are the program and its arguments.
	Exe  string
	Args []string
	// Dir is its working directory ("": this one).
	Dir string
	// Env is added to this process' environment.
	Env []string
	// Log receives its stdout and stderr; nil discards them.
	Log io.Writer
	// Ready is a URL polled until it answers 2xx, or a "tcp://host:port"
	// dialled until it accepts; "" means no wait.
	Ready string
	// ReadyTimeout zero means 2 minutes.
	ReadyTimeout time.Duration
}

// Child is a running child process.
type Child struct {
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
}

// StartChild starts cfg.Exe and waits until cfg.Ready answers.
func StartChild(ctx context.Context, cfg ChildConfig) (*Child, error) {
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = readyWait
	}
	cmd := exec.Command(cfg.Exe, cfg.Args...)
	cmd.Dir = cfg.Dir
	if cfg.Env != nil {
		cmd.Env = append(os.Environ(), cfg.Env...)
	}
	if cfg.Log != nil {
		cmd.Stdout, cmd.Stderr = cfg.Log, cfg.Log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %s: %w", cfg.Exe, err)
	}
	c := &Child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	if cfg.Ready == "" {
		return c, nil
	}
	deadline := time.Now().Add(cfg.ReadyTimeout)
	for {
		if err := probeReady(ctx, cfg.Ready); err == nil {
			return c, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			_ = c.Stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("bench: %s not ready at %s: %w", cfg.Exe, cfg.Ready, errors.Join(err, ctx.Err()))
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("bench: %s exited before it was ready: %v", cfg.Exe, c.waitErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func probeReady(ctx context.Context, ready string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if addr, ok := strings.CutPrefix(ready, "tcp://"); ok {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ready, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %d", ready, resp.StatusCode)
	}
	return nil
}

// PID is the child's process ID.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Stop sends SIGTERM and waits, killing after 10 s or when ctx ends.
func (c *Child) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		case <-ctx.Done():
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return nil
}

// ProcStats are a process' CPU time and peak resident memory, read from
// /proc (Linux).
type ProcStats struct {
	// CPUSeconds is user plus system time so far.
	CPUSeconds float64 `json:"cpu_seconds"`
	// PeakRSSBytes is VmHWM, the peak resident set size.
	PeakRSSBytes float64 `json:"peak_rss_bytes"`
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ReadProc reads pid's CPU time from /proc/PID/stat and its peak memory
// from /proc/PID/status.
func ReadProc(pid int) (ProcStats, error) {
	var st ProcStats
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, fmt.Errorf("bench: %w", err)
	}
	// The command name (field 2) may hold spaces: fields count from the
	// last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return st, fmt.Errorf("bench: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return st, fmt.Errorf("bench: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	stm, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return st, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
	}
	st.CPUSeconds = float64(ut+stm) / clockTicks
	b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return st, fmt.Errorf("bench: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return st, fmt.Errorf("bench: /proc/%d/status: %w", pid, err)
			}
			st.PeakRSSBytes = kb * 1024
		}
	}
	return st, nil
}
