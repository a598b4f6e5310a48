package datastore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults and bounds of Config.
const (
	DefaultMaxDepth           = 50
	MaxMaxDepth               = 10000
	DefaultChangelogRetention = 100_000
	DefaultOpenTimeout        = 2 * time.Second
)

// Config configures a bbolt store. The zero value of every field but Path
// means its documented default.
type Config struct {
	// Path is the bbolt data file, created if missing. Required.
	Path string
	// Logger receives operational logs. Nil discards them.
	Logger *slog.Logger
	// MaxDepth bounds the nesting of one check (every relation or
	// permission evaluated inside another counts one level). Zero means
	// DefaultMaxDepth (50); at most MaxMaxDepth. A check that would go
	// deeper fails with ErrDepthExceeded.
	MaxDepth int
	// ChangelogRetention is how many of the latest revisions the changelog
	// keeps for Watch. Zero means DefaultChangelogRetention (100,000);
	// negative is invalid.
	ChangelogRetention int
	// ReadOnly opens the file read-only (shared lock): no writes.
	ReadOnly bool
	// OpenTimeout is how long Open waits for another process's file lock.
	// Zero means DefaultOpenTimeout (2s).
	OpenTimeout time.Duration
}

// Validate fills defaults and rejects nonsense.
func (c *Config) Validate() error {
	if c.Path == "" {
		return errors.New("datastore: Config.Path is required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.MaxDepth == 0:
		c.MaxDepth = DefaultMaxDepth
	case c.MaxDepth < 0 || c.MaxDepth > MaxMaxDepth:
		return fmt.Errorf("datastore: Config.MaxDepth %d out of range 1..%d", c.MaxDepth, MaxMaxDepth)
	}
	switch {
	case c.ChangelogRetention == 0:
		c.ChangelogRetention = DefaultChangelogRetention
	case c.ChangelogRetention < 0:
		return fmt.Errorf("datastore: Config.ChangelogRetention %d is negative", c.ChangelogRetention)
	}
	switch {
	case c.OpenTimeout == 0:
		c.OpenTimeout = DefaultOpenTimeout
	case c.OpenTimeout < 0:
		return fmt.Errorf("datastore: Config.OpenTimeout %v is negative", c.OpenTimeout)
	}
	return nil
}
