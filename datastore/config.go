package datastore

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults and bounds of Config.
const (
	defaultMaxDepth           = 50
	maxMaxDepth               = 10000
	defaultChangelogRetention = 100_000
	defaultOpenTimeout        = 2 * time.Second
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
	// 50; at most 10,000. A check that would go deeper fails with
	// ErrDepthExceeded.
	MaxDepth int
	// ChangelogRetention is how many of the latest revisions the changelog
	// keeps for Watch. Zero means 100,000; negative is invalid.
	ChangelogRetention int
	// ReadOnly opens the file read-only (shared lock): no writes.
	ReadOnly bool
	// OpenTimeout is how long Open waits for another process's file lock.
	// Zero means 2s.
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
		c.MaxDepth = defaultMaxDepth
	case c.MaxDepth < 0 || c.MaxDepth > maxMaxDepth:
		return fmt.Errorf("datastore: Config.MaxDepth %d out of range 1..%d", c.MaxDepth, maxMaxDepth)
	}
	switch {
	case c.ChangelogRetention == 0:
		c.ChangelogRetention = defaultChangelogRetention
	case c.ChangelogRetention < 0:
		return fmt.Errorf("datastore: Config.ChangelogRetention %d is negative", c.ChangelogRetention)
	}
	switch {
	case c.OpenTimeout == 0:
		c.OpenTimeout = defaultOpenTimeout
	case c.OpenTimeout < 0:
		return fmt.Errorf("datastore: Config.OpenTimeout %v is negative", c.OpenTimeout)
	}
	return nil
}
