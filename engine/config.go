package engine

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
)

// Defaults used by Validate for zero fields.
const (
	// DefaultMemoryLimitPages is 4096 pages of 64 KiB: 256 MiB per instance.
	DefaultMemoryLimitPages = 4096
	// DefaultMaxInstanceBytes is the memory size past which an instance is
	// discarded after an evaluation instead of going back to the pool.
	DefaultMaxInstanceBytes = 64 << 20
)

// Config configures an Engine. The zero value is usable.
type Config struct {
	// Logger receives load and discard events. Nil discards.
	Logger *slog.Logger
	// MaxInstances bounds the instances per loaded bundle (and so the
	// evaluations running at once). Zero means GOMAXPROCS.
	MaxInstances int
	// MemoryLimitPages is the most 64 KiB pages one instance's memory may
	// grow to; an evaluation that needs more fails with CodeMemory. Zero
	// means DefaultMemoryLimitPages; at most 65536.
	MemoryLimitPages uint32
	// MaxInstanceBytes: an instance whose memory grew past this many bytes
	// is discarded after its evaluation. Zero means DefaultMaxInstanceBytes.
	MaxInstanceBytes uint64
	// Builtins holds the host builtins policies may call besides OPA's. Nil
	// means none (OPA's builtins are always there).
	Builtins *Registry
	// Print receives the output of policies' print() calls, one line each
	// (policies must be compiled with compiler.Options.EnablePrint). Nil
	// discards. Writes are serialised.
	Print io.Writer
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxInstances < 0 {
		return fmt.Errorf("engine: MaxInstances %d is negative", c.MaxInstances)
	}
	if c.MaxInstances == 0 {
		c.MaxInstances = runtime.GOMAXPROCS(0)
	}
	if c.MemoryLimitPages == 0 {
		c.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if c.MemoryLimitPages > 65536 {
		return fmt.Errorf("engine: MemoryLimitPages %d exceeds 65536 (4 GiB)", c.MemoryLimitPages)
	}
	if c.MaxInstanceBytes == 0 {
		c.MaxInstanceBytes = DefaultMaxInstanceBytes
	}
	if c.MaxInstanceBytes > uint64(c.MemoryLimitPages)*65536 {
		c.MaxInstanceBytes = uint64(c.MemoryLimitPages) * 65536
	}
	if c.Builtins == nil {
		c.Builtins = NewRegistry()
	}
	if c.MaxInstances > 1<<16 {
		return errors.New("engine: MaxInstances above 65536")
	}
	return nil
}
