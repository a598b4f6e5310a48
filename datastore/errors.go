package datastore

import (
	"errors"
	"fmt"
	"time"

	"github.com/nexuspdp/nexus/datastore/internal/check"
	"github.com/nexuspdp/nexus/datastore/schema"
)

// ErrDepthExceeded is returned by Check and the lookups when a walk goes
// deeper than Config.MaxDepth. The check has no answer; callers must fail
// closed.
var ErrDepthExceeded = check.ErrDepthExceeded

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("datastore: store is closed")

// ErrNoSchema is returned by writes and checks before a schema was written.
var ErrNoSchema = check.ErrNoSchema

// ErrInvalidSchema is matched (errors.Is) by every *schema.Error; it is
// schema.ErrInvalid.
var ErrInvalidSchema = schema.ErrInvalid

// ErrInvalidTuple is returned (wrapped) when a tuple does not fit the schema
// or the syntax of package api; it is schema.ErrInvalidTuple.
var ErrInvalidTuple = schema.ErrInvalidTuple

// ErrUnknown is returned (wrapped) when a check or lookup names a type,
// relation or permission that the schema does not declare.
var ErrUnknown = check.ErrUnknown

// ErrPreconditionFailed is returned by Write when one of its preconditions
// does not hold; nothing was written.
var ErrPreconditionFailed = errors.New("datastore: precondition failed")

// ErrSchemaOrphans is matched by *OrphanError: a schema write that would
// leave stored tuples the new schema does not allow.
var ErrSchemaOrphans = errors.New("datastore: schema change would orphan stored tuples")

// ErrRevisionCompacted is returned by Watch when the requested revision is
// older than the changelog retains; the watcher must resync from a snapshot.
var ErrRevisionCompacted = errors.New("datastore: revision no longer in the changelog")

// ErrBadImport is matched by *ImportError: an invalid line stopped an import.
var ErrBadImport = errors.New("datastore: invalid import line")

// ErrFormat is returned when the data file was written by an incompatible
// version of nexus, or is not a nexus store.
var ErrFormat = errors.New("datastore: unsupported data file format")

// ErrCorrupt is matched by *CorruptError: the data file is damaged. Open
// returns it when the file's meta pages, free list or index roots are
// invalid; every other method returns it when bbolt or the store's key
// decoding fails on a damaged page or key. From then on Health reports it
// and writes are refused, until the store is reopened on a repaired file.
var ErrCorrupt = errors.New("datastore: data file is corrupt")

// ErrLocked is matched by *LockedError: another process has the data
// file open.
var ErrLocked = errors.New("datastore: data file is locked by another process")

// OrphanError lists stored tuples (up to 100, and their total count) that a
// schema write would orphan.
type OrphanError struct {
	Count    int
	Examples []string
}

func (e *OrphanError) Error() string {
	return fmt.Sprintf("datastore: schema change would orphan %d stored tuple(s), e.g. %v (write with force to drop them)", e.Count, e.Examples)
}

// Is makes errors.Is(err, ErrSchemaOrphans) true.
func (e *OrphanError) Is(target error) bool { return target == ErrSchemaOrphans }

// ImportError reports the first invalid line of an import.
type ImportError struct {
	Line int   // 1-based line number in the input
	Err  error // what is wrong with it
}

func (e *ImportError) Error() string { return fmt.Sprintf("import: line %d: %v", e.Line, e.Err) }

// Unwrap returns the cause.
func (e *ImportError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrBadImport) true.
func (e *ImportError) Is(target error) bool { return target == ErrBadImport }

// CorruptError reports damage found in the data file.
type CorruptError struct {
	Path string // the data file
	Op   string // what found it: "open", "verify", "check", "write", ...
	Err  error  // what is wrong, e.g. bbolt's report of the damaged page
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("datastore: %s is corrupt (found by %s): %v", e.Path, e.Op, e.Err)
}

// Unwrap returns what is wrong.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// LockedError reports that Open waited Config.OpenTimeout for the data
// file's lock, held by another process: a running nexus server, or a nexus
// command working on the same data directory.
type LockedError struct {
	Path     string
	Wait     time.Duration // how long Open waited
	PID      int           // the process holding the lock, 0 if unknown
	ReadOnly bool          // Open wanted a shared (read-only) lock
}

func (e *LockedError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("another process (pid %d)", e.PID)
	}
	want := "exclusive"
	if e.ReadOnly {
		want = "shared"
	}
	return fmt.Sprintf("datastore: %s is locked by %s: a nexus server or another nexus command has it open; "+
		"stop it, or make changes through the running server's admin API (waited %v for a %s lock)", e.Path, who, e.Wait, want)
}

// Is makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }
