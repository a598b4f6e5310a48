package datastore

import (
	"bytes"
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
	// Check evaluates a permission or relation of an object for a subject.
	Check(ctx context.Context, req CheckRequest) (CheckResult, error)
	// CheckString is Check for text arguments ("type:id", permission,
	// "type:id[#relation]") without allocation on the common path.
	CheckString(ctx context.Context, object, permission, subject string) (bool, error)
	// Roles returns the tenant roles subject holds in tenant: the
	// relations r of tuples tenantType:tenant#r@subject.
	Roles(ctx context.Context, subject api.Subject, tenant string) ([]string, error)
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

// WriteRequest is one atomic write.
type WriteRequest struct {
	Touches       []api.Tuple
	Deletes       []api.Tuple
	Preconditions []Precondition
}

// Precondition must hold for a Write to apply: some tuple matches Filter
// (MustExist) or none does (!MustExist).
type Precondition struct {
	Filter    Filter
	MustExist bool
}

// Filter selects tuples. Empty fields match anything; ObjectID needs
// ObjectType and SubjectID needs SubjectType. SubjectRelation matches the
// subject's relation exactly when set ("" matches any). Limit bounds the
// result (0 means no limit).
type Filter struct {
	ObjectType      string
	ObjectID        string
	Relation        string
	SubjectType     string
	SubjectID       string
	SubjectRelation string
	Limit           int
}

// Op is what a change did.
type Op uint8

// Change operations.
const (
	OpTouch  Op = 1 // the tuple was inserted
	OpDelete Op = 2 // the tuple was removed
)

func (o Op) String() string {
	switch o {
	case OpTouch:
		return "touch"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Change is one tuple inserted or removed.
type Change struct {
	Op    Op
	Tuple api.Tuple
}

// ChangeSet is what one revision changed. Touches of tuples that already
// existed and deletes of missing tuples are not recorded. Schema is set on
// revisions that wrote a schema.
type ChangeSet struct {
	Revision Revision
	Time     time.Time
	Schema   bool
	Changes  []Change
}

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
		return nil, fmt.Errorf("datastore: open %s: %w", cfg.Path, err)
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

func be64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
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

// Path returns the data file path.
func (s *BoltStore) Path() string { return s.cfg.Path }

// signal wakes watchers after a commit.
func (s *BoltStore) signal() {
	s.notifyMu.Lock()
	close(s.notify)
	s.notify = make(chan struct{})
	s.notifyMu.Unlock()
}

func (s *BoltStore) waitChan() <-chan struct{} {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	return s.notify
}

// Schema returns the current schema.
func (s *BoltStore) Schema(ctx context.Context) (*Schema, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	sc := s.state.Load().schema
	if sc == nil {
		return nil, ErrNoSchema
	}
	return sc, nil
}

// Revision returns the latest committed revision.
func (s *BoltStore) Revision(ctx context.Context) (Revision, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	return Revision(s.rev.Load()), nil
}

// committed records rev once its transaction has committed. Commit
// handlers run after bbolt's write lock is released, so two may run out
// of order: the revision only moves forward.
func (s *BoltStore) committed(rev Revision) {
	for {
		cur := s.rev.Load()
		if uint64(rev) <= cur || s.rev.CompareAndSwap(cur, uint64(rev)) {
			return
		}
	}
}

func readRev(tx *bolt.Tx) Revision {
	v := tx.Bucket(bMeta).Get(kRev)
	if len(v) != 8 {
		return 0
	}
	return Revision(binary.BigEndian.Uint64(v))
}

// bumpRev increments the revision, appends cs to the changelog and prunes
// what the retention no longer keeps.
func (s *BoltStore) bumpRev(tx *bolt.Tx, cs *ChangeSet, encoded []byte) (Revision, error) {
	rev := readRev(tx) + 1
	m := tx.Bucket(bMeta)
	if err := m.Put(kRev, be64(uint64(rev))); err != nil {
		return 0, err
	}
	tx.OnCommit(func() { s.committed(rev) })
	cs.Revision = rev
	lb := tx.Bucket(bLog)
	if err := lb.Put(be64(uint64(rev)), encoded); err != nil {
		return 0, err
	}
	keep := uint64(s.cfg.ChangelogRetention)
	if uint64(rev) > keep {
		cut := uint64(rev) - keep // revisions <= cut are dropped
		start := binary.BigEndian.Uint64(m.Get(kLogStart))
		if start <= cut {
			c := lb.Cursor()
			for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= cut; k, _ = c.Next() {
				if err := c.Delete(); err != nil {
					return 0, err
				}
			}
			if err := m.Put(kLogStart, be64(cut+1)); err != nil {
				return 0, err
			}
		}
	}
	return rev, nil
}

// WriteSchema stores a schema; see Store.
func (s *BoltStore) WriteSchema(ctx context.Context, sc *Schema, force bool) (Revision, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if sc == nil {
		return 0, fmt.Errorf("%w: nil schema", ErrInvalidSchema)
	}
	// A private copy: its compiled form is bound to this store's dictionary.
	sc, err := ParseSchema(sc.src)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeBegin()
	defer s.writeEnd()
	var rev Revision
	var newState *state
	err = s.db.Update(func(tx *bolt.Tx) error {
		old := s.state.Load()
		d := &dict{ids: make(map[string]uint64, len(old.dict.ids)), names: append([]string(nil), old.dict.names...)}
		for k, v := range old.dict.ids {
			d.ids[k] = v
		}
		db := tx.Bucket(bDict)
		for _, n := range sc.names() {
			if _, ok := d.ids[n]; ok {
				continue
			}
			id := uint64(len(d.names))
			d.ids[n] = id
			d.names = append(d.names, n)
			if err := db.Put([]byte(n), binary.AppendUvarint(nil, id)); err != nil {
				return err
			}
		}
		cs := &ChangeSet{Time: time.Now(), Schema: true}
		if old.schema != nil {
			orphans, err := s.findOrphans(ctx, tx, old, sc)
			if err != nil {
				return err
			}
			if len(orphans) > 0 {
				if !force {
					oe := &OrphanError{Count: len(orphans)}
					for i, t := range orphans {
						if i == 100 {
							break
						}
						oe.Examples = append(oe.Examples, t.String())
					}
					return oe
				}
				for _, t := range orphans {
					n, _ := tupleIDs(d, t)
					if err := deleteKeys(tx, n, t); err != nil {
						return err
					}
					cs.Changes = append(cs.Changes, Change{Op: OpDelete, Tuple: t})
				}
			}
		}
		if err := tx.Bucket(bMeta).Put(kSchema, sc.src); err != nil {
			return err
		}
		enc, err := encodeChangeSet(d, cs)
		if err != nil {
			return err
		}
		rev, err = s.bumpRev(tx, cs, enc)
		sc.bind(d)
		newState = &state{schema: sc, dict: d}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("datastore: write schema: %w", err)
	}
	s.state.Store(newState)
	s.signal()
	s.log.Info("schema written", "revision", rev)
	return rev, nil
}

// findOrphans lists stored tuples of the types whose relations or accepted
// subject types shrink from old to next, that next does not allow.
func (s *BoltStore) findOrphans(ctx context.Context, tx *bolt.Tx, old *state, next *Schema) ([]api.Tuple, error) {
	var out []api.Tuple
	for _, tn := range old.schema.order {
		ot := old.schema.types[tn]
		nt := next.types[tn]
		shrinks := nt == nil
		if !shrinks {
			for _, m := range ot.order {
				if m.perm {
					continue
				}
				nm := nt.members[m.name]
				if nm == nil || nm.perm {
					shrinks = true
					break
				}
				for _, a := range m.allowed {
					found := false
					for _, b := range nm.allowed {
						if a == b {
							found = true
						}
					}
					if !found {
						shrinks = true
					}
				}
			}
		}
		if !shrinks {
			continue
		}
		typeID, _ := old.dict.id(tn)
		prefix := binary.AppendUvarint(nil, typeID)
		c := tx.Bucket(bObj).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			t, err := decodeTuple(old.dict, k)
			if err != nil {
				return nil, err
			}
			if next.validateTuple(t) != nil {
				out = append(out, t)
			}
		}
	}
	return out, nil
}

// tupleIDs interns the names of t; ok is false if one is unknown.
func tupleIDs(d *dict, t api.Tuple) (ids, bool) {
	var n ids
	var ok1, ok2, ok3, ok4 bool
	n.ot, ok1 = d.id(t.Object.Type)
	n.rel, ok2 = d.id(t.Relation)
	n.st, ok3 = d.id(t.Subject.Type)
	n.sr, ok4 = d.id(t.Subject.Relation)
	return n, ok1 && ok2 && ok3 && ok4
}

func deleteKeys(tx *bolt.Tx, n ids, t api.Tuple) error {
	if err := tx.Bucket(bObj).Delete(appendObjKey(nil, n, t.Object.ID, t.Subject.ID)); err != nil {
		return err
	}
	return tx.Bucket(bSubj).Delete(appendSubjKey(nil, n, t.Object.ID, t.Subject.ID))
}

func decodeTuple(d *dict, k []byte) (api.Tuple, error) {
	n, oid, sid, err := decodeObjKey(k)
	if err != nil {
		return api.Tuple{}, err
	}
	return tupleFromIDs(d, n, oid, sid)
}

func tupleFromIDs(d *dict, n ids, oid, sid []byte) (api.Tuple, error) {
	ot, ok1 := d.name(n.ot)
	rel, ok2 := d.name(n.rel)
	st, ok3 := d.name(n.st)
	sr, ok4 := d.name(n.sr)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return api.Tuple{}, errBadKey
	}
	return api.Tuple{Object: api.Object{Type: ot, ID: string(oid)}, Relation: rel, Subject: api.Subject{Type: st, ID: string(sid), Relation: sr}}, nil
}

// encodeChangeSet: uvarint(unix nanos) uvarint(flags) then per change:
// op byte, uvarint(len(objkey)), objkey.
func encodeChangeSet(d *dict, cs *ChangeSet) ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(cs.Time.UnixNano()))
	flags := uint64(0)
	if cs.Schema {
		flags = 1
	}
	b = binary.AppendUvarint(b, flags)
	var kb []byte
	for _, c := range cs.Changes {
		n, ok := tupleIDs(d, c.Tuple)
		if !ok {
			return nil, fmt.Errorf("%w: %s: name not in dictionary", ErrInvalidTuple, c.Tuple)
		}
		kb = appendObjKey(kb[:0], n, c.Tuple.Object.ID, c.Tuple.Subject.ID)
		b = append(b, byte(c.Op))
		b = binary.AppendUvarint(b, uint64(len(kb)))
		b = append(b, kb...)
	}
	return b, nil
}

func decodeChangeSet(d *dict, rev Revision, v []byte) (ChangeSet, error) {
	cs := ChangeSet{Revision: rev}
	ns, v, err := uvarint(v)
	if err != nil {
		return cs, err
	}
	cs.Time = time.Unix(0, int64(ns))
	flags, v, err := uvarint(v)
	if err != nil {
		return cs, err
	}
	cs.Schema = flags&1 != 0
	for len(v) > 0 {
		op := Op(v[0])
		var l uint64
		if l, v, err = uvarint(v[1:]); err != nil || l > uint64(len(v)) {
			return cs, errBadKey
		}
		t, err := decodeTuple(d, v[:l])
		if err != nil {
			return cs, err
		}
		v = v[l:]
		cs.Changes = append(cs.Changes, Change{Op: op, Tuple: t})
	}
	return cs, nil
}

// Write applies a WriteRequest atomically.
func (s *BoltStore) Write(ctx context.Context, req WriteRequest) (Revision, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if s.cfg.ReadOnly {
		return 0, errors.New("datastore: write: store opened read-only")
	}
	st := s.state.Load()
	if st.schema == nil {
		return 0, ErrNoSchema
	}
	for _, t := range req.Touches {
		if err := st.schema.validateTuple(t); err != nil {
			return 0, err
		}
	}
	for _, t := range req.Deletes {
		if err := st.schema.validateTuple(t); err != nil {
			return 0, err
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.writeBegin()
	defer s.writeEnd()
	var rev Revision
	err := s.db.Batch(func(tx *bolt.Tx) error {
		if cur := s.state.Load(); cur != st {
			// The schema changed since validation: validate again.
			st = cur
			for _, t := range append(append([]api.Tuple(nil), req.Touches...), req.Deletes...) {
				if err := st.schema.validateTuple(t); err != nil {
					return err
				}
			}
		}
		for i, p := range req.Preconditions {
			found, err := s.exists(tx, st, p.Filter)
			if err != nil {
				return err
			}
			if found != p.MustExist {
				return fmt.Errorf("%w: precondition %d (%+v, must exist %v)", ErrPreconditionFailed, i, p.Filter, p.MustExist)
			}
		}
		cs := &ChangeSet{Time: time.Now()}
		ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
		var kb, sk []byte
		for _, t := range req.Deletes {
			n, _ := tupleIDs(st.dict, t)
			kb = appendObjKey(kb[:0], n, t.Object.ID, t.Subject.ID)
			if ob.Get(kb) == nil {
				continue
			}
			if err := ob.Delete(kb); err != nil {
				return err
			}
			sk = appendSubjKey(sk[:0], n, t.Object.ID, t.Subject.ID)
			if err := sb.Delete(sk); err != nil {
				return err
			}
			cs.Changes = append(cs.Changes, Change{Op: OpDelete, Tuple: t})
		}
		for _, t := range req.Touches {
			n, _ := tupleIDs(st.dict, t)
			kb = appendObjKey(kb[:0], n, t.Object.ID, t.Subject.ID)
			if ob.Get(kb) != nil {
				continue
			}
			if err := ob.Put(kb, nil); err != nil {
				return err
			}
			sk = appendSubjKey(sk[:0], n, t.Object.ID, t.Subject.ID)
			if err := sb.Put(sk, nil); err != nil {
				return err
			}
			cs.Changes = append(cs.Changes, Change{Op: OpTouch, Tuple: t})
		}
		enc, err := encodeChangeSet(st.dict, cs)
		if err != nil {
			return err
		}
		rev, err = s.bumpRev(tx, cs, enc)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrInvalidTuple) {
			return 0, err
		}
		return 0, fmt.Errorf("datastore: write: %w", err)
	}
	s.signal()
	return rev, nil
}

// exists reports whether some tuple matches f.
func (s *BoltStore) exists(tx *bolt.Tx, st *state, f Filter) (bool, error) {
	f.Limit = 1
	found := false
	err := s.scan(tx, st, f, func(api.Tuple) bool { found = true; return false })
	return found, err
}

// Read returns the tuples matching f.
func (s *BoltStore) Read(ctx context.Context, f Filter) ([]api.Tuple, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	st := s.state.Load()
	var out []api.Tuple
	err := s.db.View(func(tx *bolt.Tx) error {
		return s.scan(tx, st, f, func(t api.Tuple) bool {
			out = append(out, t)
			return ctx.Err() == nil
		})
	})
	if err == nil {
		err = ctx.Err()
	}
	return out, err
}

// scan calls fn for each tuple matching f until fn returns false.
func (s *BoltStore) scan(tx *bolt.Tx, st *state, f Filter, fn func(api.Tuple) bool) error {
	if f.ObjectID != "" && f.ObjectType == "" || f.SubjectID != "" && f.SubjectType == "" || f.SubjectRelation != "" && f.SubjectType == "" {
		return fmt.Errorf("datastore: filter %+v: an ID or subject relation needs its type", f)
	}
	d := st.dict
	lookup := func(name string) (uint64, bool) {
		if name == "" {
			return 0, true
		}
		return d.id(name)
	}
	ot, ok1 := lookup(f.ObjectType)
	rel, ok2 := lookup(f.Relation)
	stp, ok3 := lookup(f.SubjectType)
	sr, ok4 := lookup(f.SubjectRelation)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil // a name never seen matches nothing
	}
	var prefix []byte
	useSubj := false
	switch {
	case f.ObjectType != "":
		prefix = binary.AppendUvarint(nil, ot)
		if f.ObjectID != "" {
			prefix = append(append(prefix, f.ObjectID...), 0)
			if f.Relation != "" {
				prefix = binary.AppendUvarint(prefix, rel)
			}
		}
	case f.SubjectType != "":
		useSubj = true
		prefix = binary.AppendUvarint(nil, stp)
		if f.SubjectID != "" {
			prefix = append(append(prefix, f.SubjectID...), 0)
		}
	}
	bucket, decode := bObj, decodeObjKey
	if useSubj {
		bucket, decode = bSubj, decodeSubjKey
	}
	c := tx.Bucket(bucket).Cursor()
	n := 0
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		ids, oid, sid, err := decode(k)
		if err != nil {
			return err
		}
		if f.ObjectType != "" && ids.ot != ot || f.ObjectID != "" && string(oid) != f.ObjectID ||
			f.Relation != "" && ids.rel != rel || f.SubjectType != "" && ids.st != stp ||
			f.SubjectID != "" && string(sid) != f.SubjectID || f.SubjectRelation != "" && ids.sr != sr {
			continue
		}
		t, err := tupleFromIDs(d, ids, oid, sid)
		if err != nil {
			return err
		}
		n++
		if !fn(t) || f.Limit > 0 && n >= f.Limit {
			return nil
		}
	}
	return nil
}

// Watch yields change sets after from; see Store.
func (s *BoltStore) Watch(ctx context.Context, from Revision) iter.Seq2[ChangeSet, error] {
	return func(yield func(ChangeSet, error) bool) {
		next := from + 1
		for {
			if err := s.check(ctx); err != nil {
				yield(ChangeSet{}, err)
				return
			}
			wait := s.waitChan()
			var batch []ChangeSet
			err := s.db.View(func(tx *bolt.Tx) error {
				start := binary.BigEndian.Uint64(tx.Bucket(bMeta).Get(kLogStart))
				if uint64(next) < start {
					return fmt.Errorf("%w: revision %d, oldest retained %d", ErrRevisionCompacted, next, start)
				}
				d := s.state.Load().dict
				c := tx.Bucket(bLog).Cursor()
				for k, v := c.Seek(be64(uint64(next))); k != nil && len(batch) < 1024; k, v = c.Next() {
					cs, err := decodeChangeSet(d, Revision(binary.BigEndian.Uint64(k)), v)
					if err != nil {
						return err
					}
					batch = append(batch, cs)
				}
				return nil
			})
			if err != nil {
				yield(ChangeSet{}, err)
				return
			}
			for _, cs := range batch {
				if !yield(cs, nil) {
					return
				}
				next = cs.Revision + 1
			}
			if len(batch) > 0 {
				continue
			}
			select {
			case <-ctx.Done():
				yield(ChangeSet{}, ctx.Err())
				return
			case <-wait:
			}
		}
	}
}
