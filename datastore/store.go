package datastore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/check"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	"github.com/nexuspdp/nexus/datastore/schema"
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
	WriteSchema(ctx context.Context, s *schema.Schema, force bool) (Revision, error)
	// Schema returns the current schema (ErrNoSchema if none).
	Schema(ctx context.Context) (*schema.Schema, error)
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
	// AppendSubjects appends to dst the subjects of object's direct
	// tuples of relation ("type:id" or "type:id#relation", in key order,
	// as Read's tuples name them) and returns the extended slice. It
	// reads the same tuples as Read with that object and relation,
	// without building them.
	AppendSubjects(ctx context.Context, dst []string, object api.Object, relation string) ([]string, error)
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
	db     *liveDB
	state  atomic.Pointer[state]
	mu     sync.RWMutex // schema writes hold it; tuple writes and import batches share it
	closed atomic.Bool

	notifyMu sync.Mutex
	notify   chan struct{} // closed and replaced after each commit

	pool sync.Pool // *View

	snap    atomic.Pointer[snapshot]
	snapMu  sync.Mutex
	writers int

	// stateGen counts the writes that publish a new state (schema writes,
	// restores), and is odd while one is between its commit and the
	// publication of its state; stateMu is write-locked meanwhile. A read
	// pairs the state with a snapshot only when stateGen did not move
	// between the two (stateAndSnapshot).
	stateGen atomic.Uint64
	stateMu  sync.RWMutex

	// rev is the committed revision: every check reads it (for its cache
	// key), so it is kept here rather than read in a transaction.
	rev atomic.Uint64

	// corrupt is the first corruption a method met (see health.go).
	corrupt atomic.Pointer[CorruptError]
	// distrust is the damage the scrub found in the data (scrub.go): every
	// read fails with it from then on.
	distrust atomic.Pointer[CorruptError]

	batchMu  sync.Mutex
	batchCur *writeBatch // the batch of Writes gathering, if any (batch.go)
}

// state is the schema (nil before one is written) and name dictionary
// in force.
type state = check.State

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

	allBuckets = [][]byte{bMeta, bDict, bObj, bSubj, bLog}
)

// Open opens or creates the data file at cfg.Path. Before anything is
// read or written it checks the file's structure (checkFile): both meta
// pages, the free list, and the root and branch pages of every index; a
// damaged file fails with a *CorruptError, a file another process has open
// with a *LockedError once Config.OpenTimeout has passed.
func Open(ctx context.Context, cfg Config) (_ *BoltStore, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &BoltStore{cfg: cfg, log: cfg.Logger, notify: make(chan struct{})}
	defer func() {
		if err != nil && s.db != nil {
			_ = s.db.Close()
		}
	}()
	defer s.guard("open", debug.SetPanicOnFault(true), &err)
	unsynced, err := checkUnsynced(cfg)
	if err != nil {
		return nil, err
	}
	db, err := openBolt(cfg)
	if err != nil {
		return nil, err
	}
	s.db = newLiveDB(db)
	if err := s.checkFile(); err != nil {
		return nil, err
	}
	if unsynced && !cfg.ReadOnly {
		// The last process died with commits the kernel has not written
		// out yet: write them before the record goes (see Unsync).
		if err := s.db.Sync(); err != nil {
			return nil, fmt.Errorf("datastore: open %s: sync: %w", cfg.Path, err)
		}
		if err := removeDurably(cfg.Path + unsyncedSuffix); err != nil {
			return nil, fmt.Errorf("datastore: open %s: %w", cfg.Path, err)
		}
	}
	if err := s.initialise(); err != nil {
		return nil, err
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bMeta)
		if m.Get(kFormat) == nil {
			return fmt.Errorf("%w: the format marker is missing", index.ErrBadKey)
		}
		if v := m.Get(kFormat); len(v) != 1 || v[0] != formatVersion {
			return fmt.Errorf("%w: %s: format %v, want %d", ErrFormat, cfg.Path, v, formatVersion)
		}
		if v := m.Get(kLogStart); len(v) != 8 {
			return fmt.Errorf("%w: the changelog start is %d bytes long, want 8", index.ErrBadKey, len(v))
		}
		if v := m.Get(kRev); v != nil && len(v) != 8 {
			return fmt.Errorf("%w: the revision is %d bytes long, want 8", index.ErrBadKey, len(v))
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
		return nil, err
	}
	s.pool.New = func() any { return &View{c: check.New()} }
	s.snapMu.Lock()
	s.publishLocked()
	s.snapMu.Unlock()
	s.log.Info("datastore opened", "path", cfg.Path)
	return s, nil
}

// openBolt opens the bbolt file of cfg. A lock held too long is a
// *LockedError. A panic of bbolt on a damaged meta page or free list
// reaches Open's guard; the file bbolt had opened is unlocked and closed
// first, so that its lock does not outlive the failed Open (its memory
// map does: address space only).
func openBolt(cfg Config) (db *bolt.DB, err error) {
	var file *os.File
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				unlock(file)
				_ = file.Close()
			}
			panic(r)
		}
	}()
	db, err = bolt.Open(cfg.Path, 0o600, &bolt.Options{
		Timeout:        cfg.OpenTimeout,
		ReadOnly:       cfg.ReadOnly,
		FreelistType:   bolt.FreelistMapType,
		NoGrowSync:     false,
		NoFreelistSync: false,
		// Map generously up front: growing the map makes bbolt copy every
		// dirty node out of the old one, which dominates large imports.
		// Only address space; pages count as memory once touched.
		InitialMmapSize: initialMmapSize,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	})
	if err != nil {
		return nil, openError(cfg.Path, cfg.ReadOnly, cfg.OpenTimeout, err)
	}
	return db, nil
}

// openError explains why bbolt could not open path.
func openError(path string, readOnly bool, wait time.Duration, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return &LockedError{Path: path, Wait: wait, PID: lockHolder(path), ReadOnly: readOnly}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return &CorruptError{Path: path, Op: "open", Err: fmt.Errorf("both meta pages are invalid (a damaged file, or not a bbolt file): %w", err)}
	}
	return fmt.Errorf("datastore: open %s: %w", path, err)
}

// initialise creates the buckets of a new file. A file that has some of
// them but not all is damaged (a new bucket would hide the lost one).
func (s *BoltStore) initialise() error {
	var missing []string
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				missing = append(missing, string(b))
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case len(missing) == 0:
		return nil
	case len(missing) < len(allBuckets):
		return &CorruptError{Path: s.cfg.Path, Op: "open", Err: fmt.Errorf("the file has no bucket %s", strings.Join(missing, ", "))}
	case s.cfg.ReadOnly:
		return fmt.Errorf("%w: %s has no meta bucket", ErrFormat, s.cfg.Path)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bMeta)
		if err := m.Put(kFormat, []byte{formatVersion}); err != nil {
			return err
		}
		return m.Put(kLogStart, index.BE64(1))
	})
}

func loadState(tx *bolt.Tx) (*state, error) {
	d := &index.Dict{Numbers: map[string]uint64{}, Names: []string{""}}
	err := tx.Bucket(bDict).ForEach(func(k, v []byte) error {
		id, n := binary.Uvarint(v)
		if n <= 0 || id == 0 || id > 1<<20 {
			return fmt.Errorf("%w: dictionary entry %q", index.ErrBadKey, k)
		}
		d.Numbers[string(k)] = id
		for uint64(len(d.Names)) <= id {
			d.Names = append(d.Names, "")
		}
		if d.Names[id] != "" {
			return fmt.Errorf("%w: dictionary entries %q and %q have the same number %d", index.ErrBadKey, d.Names[id], k, id)
		}
		d.Names[id] = string(k)
		return nil
	})
	if err != nil {
		return nil, err
	}
	st := &state{Dict: d}
	if src := tx.Bucket(bMeta).Get(kSchema); src != nil {
		parsed, err := schema.Parse(src)
		if err != nil {
			return nil, fmt.Errorf("%w: the stored schema does not parse: %w", index.ErrBadKey, err)
		}
		sc := check.Compile(parsed)
		for _, n := range sc.Names() {
			if _, ok := d.Numbers[n]; !ok {
				return nil, fmt.Errorf("%w: the schema's name %q is not in the dictionary", index.ErrBadKey, n)
			}
		}
		sc.Bind(d)
		st.Graph = sc
	}
	return st, nil
}

func (s *BoltStore) check(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if ce := s.distrust.Load(); ce != nil {
		return ce
	}
	return ctx.Err()
}

// Close releases the data file. It waits for running reads to finish.
// Path returns the data file's path.
func (s *BoltStore) Path() string { return s.cfg.Path }

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
	serr := s.syncUnsynced()
	if err := s.db.Close(); err != nil {
		return err
	}
	return serr
}
