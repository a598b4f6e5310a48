package datastore

import (
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/nexuspdp/nexus/datastore/internal/index"
)

//go:noinline
func unguarded(s *BoltStore, n int) (int, error) { return n + 1, nil }

//go:noinline
func recovered(s *BoltStore, n int) (_ int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = index.ErrBadKey
		}
	}()
	return n + 1, nil
}

//go:noinline
func guarded(s *BoltStore, n int) (_ int, err error) {
	defer s.guard("bench", debug.SetPanicOnFault(true), &err)
	return n + 1, nil
}

// BenchmarkGuard measures what guard adds to a method that does not
// panic: the deferred call, recover and the goroutine's fault mode set and
// restored. Compare with BenchmarkCheck's nanoseconds per check.
func BenchmarkGuard(b *testing.B) {
	s := &BoltStore{log: slog.New(slog.DiscardHandler)}
	for _, bc := range []struct {
		name string
		fn   func(*BoltStore, int) (int, error)
	}{{"without", unguarded}, {"recover only", recovered}, {"with", guarded}} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n, _ = bc.fn(s, n)
			}
		})
	}
}

// TestGuard: a panic becomes a *CorruptError and marks the store.
func TestGuard(t *testing.T) {
	s := &BoltStore{cfg: Config{Path: "x.db"}, log: slog.New(slog.DiscardHandler)}
	err := func() (err error) {
		defer s.guard("check", debug.SetPanicOnFault(true), &err)
		var b []byte
		_ = b[3]
		return nil
	}()
	var ce *CorruptError
	if !asCorrupt(err, &ce) || ce.Op != "check" || ce.Path != "x.db" {
		t.Fatalf("err = %v", err)
	}
	if s.Health() != ce {
		t.Fatalf("Health = %v", s.Health())
	}
}

func asCorrupt(err error, ce **CorruptError) bool {
	c, ok := err.(*CorruptError)
	*ce = c
	return ok
}
