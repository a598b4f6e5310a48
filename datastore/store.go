package datastore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexuspdp/nexus/api"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Revision numbers committed write transactions: each Write, schema write
// and import batch adds one. Revision 0 is the empty store.
type Revision uint64

// Store is the relationship store. Every method is safe for concurrent use.
type Store interface {
	// WriteSchema validates and stores a schema. If the new schema would
	// orphan stored tuples it fails with an *OrphanError, unless force is
	// set, in which case those tuples are deleted in the same transaction.
	WriteSchema(ctx context.Context, s *Schema, force bool) (Revision, error)
	// Schema returns the current schema (ErrNoSchema if none).
	Schema(ctx context.Context) (*Schema, error)
	// Write applies touches (insert if missing) and deletes (remove if
	// present) atomically after checking the preconditions, and returns
	// the new revision.
	Write(ctx context.Context, req WriteRequest) (Revision, error)
	// Read returns the tuples that match the filter, in key order.
	Read(ctx context.Context, f Filter) ([]api.Tuple, error)
	// Revision returns the latest committed revision.
	Revision(ctx context.Context) (Revision, error)
	// Watch yields every change set after from, then waits for new ones
	// until ctx ends. It fails with ErrRevisionCompacted if from is older
	// than the changelog retains.
	Watch(ctx context.Context, from Revision) iter.Seq2[ChangeSet, error]
	// Check evaluates a permission or relation of an object for a
	// subject. Without a trace it does not allocate on the common path.
	Check(ctx context.Context, req CheckRequest) (CheckResult, error)
	// AppendRoles appends to dst the tenant roles subject holds directly
	// in tenant (the relations r of tuples tenantType:tenant#r@subject)
	// and returns the extended slice. With enough capacity in dst it does
	// not allocate.
	AppendRoles(ctx context.Context, dst []string, subject api.Subject, tenant string) ([]string, error)
	// LookupResources returns the IDs of objects of resourceType on which
	// subject has permission, sorted.
	LookupResources(ctx context.Context, subject api.Subject, permission, resourceType string) ([]string, error)
	// LookupSubjects returns the IDs of subjects of subjectType that have
	// permission on object, sorted.
	LookupSubjects(ctx context.Context, object api.Object, permission, subjectType string) ([]string, error)
	// Import loads tuples from r; see ImportOptions.
	Import(ctx context.Context, r io.Reader, opts ImportOptions) (ImportStats, error)
	// Export writes every tuple to w in format (FormatNDJSON by default).
	Export(ctx context.Context, w io.Writer, format Format) (int64, error)
	// Close releases the data file.
	Close() error
}

var _ Store = (*BoltStore)(nil)

// BoltStore is the bbolt implementation of Store.
type BoltStore struct {
	cfg    Config
	log    *slog.Logger
	db     *bolt.DB
	state  atomic.Pointer[state]
	mu     sync.RWMutex // schema writes hold it; tuple writes and import batches share it
	closed atomic.Bool

	notifyMu sync.Mutex
	notify   chan struct{} // closed and replaced after each commit

	pool sync.Pool // *checker

	snap    atomic.Pointer[snapshot]
	snapMu  sync.Mutex
	writers int

	// rev is the committed revision: every check reads it (for its cache
	// key), so it is kept here rather than read in a transaction.
	rev atomic.Uint64
}

// state is the schema and name dictionary in force.
type state struct {
	schema *Schema
	dict   *dict
}

const formatVersion = 1

// initialMmapSize is the address space mapped for the data file at open.
const initialMmapSize = 8 << 30

var (
	bMeta = []byte("meta")
	bDict = []byte("dict")
	bObj  = []byte("obj")
	bSubj = []byte("subj")
	bLog  = []byte("log")

	kFormat   = []byte("format")
	kRev      = []byte("rev")
	kSchema   = []byte("schema")
	kLogStart = []byte("logstart")
)

// Open opens or creates the data file at cfg.Path.
func Open(ctx context.Context, cfg Config) (*BoltStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db, err := bolt.Open(cfg.Path, 0o600, &bolt.Options{
		Timeout:        cfg.OpenTimeout,
		ReadOnly:       cfg.ReadOnly,
		FreelistType:   bolt.FreelistMapType,
		NoGrowSync:     false,
		NoFreelistSync: false,
		// Map generously up front: growing the map makes bbolt copy every
		// dirty node out of the old one, which dominates large imports.
		// Only address space; pages count as memory once touched.
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		return nil, openError(cfg.Path, cfg.ReadOnly, cfg.OpenTimeout, err)
	}
	// Concurrent Writes share a transaction (and an fsync); a lone Write
	// waits at most this long for company.
	db.MaxBatchDelay = 2 * time.Millisecond
	s := &BoltStore{cfg: cfg, log: cfg.Logger, db: db, notify: make(chan struct{})}
	if !cfg.ReadOnly {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bMeta, bDict, bObj, bSubj, bLog} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			m := tx.Bucket(bMeta)
			if v := m.Get(kFormat); v == nil {
				if err := m.Put(kFormat, []byte{formatVersion}); err != nil {
					return err
				}
				return m.Put(kLogStart, be64(1))
			}
			return nil
		})
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("datastore: initialise %s: %w", cfg.Path, err)
		}
	}
	err = db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bMeta)
		if m == nil {
			return fmt.Errorf("%w: %s has no meta bucket", ErrFormat, cfg.Path)
		}
		if v := m.Get(kFormat); len(v) != 1 || v[0] != formatVersion {
			return fmt.Errorf("%w: %s: format %v, want %d", ErrFormat, cfg.Path, v, formatVersion)
		}
		st, err := loadState(tx)
		if err != nil {
			return err
		}
		s.state.Store(st)
		s.rev.Store(uint64(readRev(tx)))
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.pool.New = func() any { return newChecker() }
	s.snapMu.Lock()
	s.publishLocked()
	s.snapMu.Unlock()
	s.log.Info("datastore opened", "path", cfg.Path)
	return s, nil
}

// openError explains why bbolt could not open path.
func openError(path string, readOnly bool, wait time.Duration, err error) error {
	if errors.Is(err, berrors.ErrTimeout) {
		return &LockedError{Path: path, Wait: wait, PID: lockHolder(path), ReadOnly: readOnly}
	}
	return fmt.Errorf("datastore: open %s: %w", path, err)
}

func loadState(tx *bolt.Tx) (*state, error) {
	d := &dict{ids: map[string]uint64{}, names: []string{""}}
	err := tx.Bucket(bDict).ForEach(func(k, v []byte) error {
		id, n := binary.Uvarint(v)
		if n <= 0 || id == 0 || id > 1<<20 {
			return fmt.Errorf("%w: bad dict entry %q", ErrFormat, k)
		}
		d.ids[string(k)] = id
		for uint64(len(d.names)) <= id {
			d.names = append(d.names, "")
		}
		d.names[id] = string(k)
		return nil
	})
	if err != nil {
		return nil, err
	}
	st := &state{dict: d}
	if src := tx.Bucket(bMeta).Get(kSchema); src != nil {
		sc, err := ParseSchema(src)
		if err != nil {
			return nil, fmt.Errorf("datastore: stored schema: %w", err)
		}
		sc.bind(d)
		st.schema = sc
	}
	return st, nil
}

func (s *BoltStore) check(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// Close releases the data file. It waits for running reads to finish.
func (s *BoltStore) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.snapMu.Lock()
	if old := s.snap.Swap(nil); old != nil {
		old.retire()
	}
	s.snapMu.Unlock()
	s.signal()
	return s.db.Close()
}
