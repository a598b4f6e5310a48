package datastore

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/nexuspdp/nexus/datastore/internal/index"
)

// bbolt reads the data file through a read-only memory map and trusts
// what it finds there: on a damaged page it panics (a failed assertion,
// an index out of range) or faults (an offset that points outside the
// map). Every method that reads or writes bbolt therefore runs under
// guard, which turns such a panic into a *CorruptError and marks the store
// unhealthy; Health reports it. A fault is only a recoverable panic on a
// goroutine that asked for it with debug.SetPanicOnFault, which the
// guarded methods do for their own duration:
//
//	func (s *BoltStore) Op(...) (..., err error) {
//		defer s.guard("op", debug.SetPanicOnFault(true), &err)
//		...
//	}
//
// No bbolt call may run on a goroutine of its own (bbolt's DB.Batch runs
// transactions on a timer's goroutine; see batch.go), or its panic would
// end the process.

// guard is deferred by the methods that touch bbolt. It restores the
// goroutine's fault mode (pass it the result of debug.SetPanicOnFault(true)),
// turns a panic into a *CorruptError in *err, and records every error
// that says the file is corrupt (a panic, or a key that does not decode).
func (s *BoltStore) guard(op string, faultMode bool, err *error) {
	debug.SetPanicOnFault(faultMode)
	if r := recover(); r != nil {
		if cp, ok := r.(callerPanic); ok {
			panic(cp.v) // the caller's code panicked, not bbolt
		}
		s.log.Error("datastore: bbolt panicked on the data file", "op", op, "panic", r, "stack", string(debug.Stack()))
		*err = &CorruptError{Path: s.cfg.Path, Op: op, Err: fmt.Errorf("panic: %v", r)}
	}
	if *err != nil {
		s.noteCorrupt(op, err)
	}
}

// noteCorrupt records the first corruption found (Health reports it),
// turning a key that does not decode into a *CorruptError.
func (s *BoltStore) noteCorrupt(op string, err *error) {
	var ce *CorruptError
	switch {
	case errors.As(*err, &ce):
	case errors.Is(*err, index.ErrBadKey):
		ce = &CorruptError{Path: s.cfg.Path, Op: op, Err: *err}
		*err = ce
	default:
		return
	}
	if s.corrupt.CompareAndSwap(nil, ce) {
		s.log.Error("datastore: the store is unhealthy and refuses writes until the data file is repaired", "err", ce)
	}
}

// Health returns nil while the store can answer: ErrClosed after Close,
// and otherwise the first *CorruptError one of its methods met (the
// store then refuses writes, and reads may fail with ErrCorrupt). A
// corrupt store stays unhealthy until it is reopened on a repaired file.
func (s *BoltStore) Health() error {
	if ce := s.corrupt.Load(); ce != nil {
		return ce
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// writable returns an error if the store may not be written.
func (s *BoltStore) writable(op string) error {
	if s.cfg.ReadOnly {
		return fmt.Errorf("datastore: %s: store opened read-only", op)
	}
	if ce := s.corrupt.Load(); ce != nil {
		return ce
	}
	return nil
}

// callerPanic carries a panic of the caller's code (the io.Writer given
// to Export) through guard unchanged.
type callerPanic struct{ v any }

// callerWriter marks panics of w as the caller's.
type callerWriter struct{ w io.Writer }

func (c callerWriter) Write(p []byte) (int, error) {
	defer func() {
		if r := recover(); r != nil {
			panic(callerPanic{r})
		}
	}()
	return c.w.Write(p)
}
