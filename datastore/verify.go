package datastore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/filecheck"
	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// VerifyReport is what Verify found in a data file.
type VerifyReport struct {
	Path     string
	PageSize int
	Pages    uint64 // pages in use or free (bbolt's high water mark)
	Tuples   int64
	// Unchecked is how many keys of the two indexes have no checksum
	// (written before the store kept one); the others were checked.
	Unchecked int64
	Revision  Revision
	// Problems lists what is wrong, at most maxProblems of them; none
	// when the file is sound.
	Problems []string
}

// maxProblems bounds VerifyReport.Problems.
const maxProblems = 100

func (r *VerifyReport) problem(format string, args ...any) bool {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
	return len(r.Problems) < maxProblems
}

// Verify checks every page and every key of the data file at path, which
// no process may have open for writing (Verify takes bbolt's shared lock,
// waiting up to 2s for it):
//
//   - the structure that Open checks on the root and branch pages, on every
//     page (see filecheck.Check);
//   - then bbolt's own consistency check (Tx.Check): key order across
//     pages, every page either reachable or free;
//   - then the store's data: its format, revision and changelog start, the
//     name dictionary, the schema, that every key of both indexes decodes
//     to a valid tuple the schema allows and matches its checksum (keys
//     without one are counted in Unchecked), that each index holds the
//     other's tuples, and that the changelog decodes.
//
// It returns a *CorruptError naming the first problem when there is one;
// the report lists them all (up to 100). A damaged page stops the check
// of the pages below it, since nothing read through it can be trusted.
func Verify(ctx context.Context, path string) (rep VerifyReport, err error) {
	rep.Path = path
	s := &BoltStore{cfg: Config{Path: path, ReadOnly: true, OpenTimeout: defaultOpenTimeout}, log: slog.New(slog.DiscardHandler)}
	defer func() {
		var ce *CorruptError
		if errors.As(err, &ce) {
			rep.problem("%v", ce.Err)
			err = nil
		}
		if err == nil && len(rep.Problems) > 0 {
			err = &CorruptError{Path: path, Op: "verify", Err: errors.New(rep.Problems[0])}
		}
	}()
	defer s.guard("verify", debug.SetPanicOnFault(true), &err)
	db, err := openBolt(s.cfg)
	if err != nil {
		return rep, err
	}
	s.db = newLiveDB(db)
	defer s.db.Close()
	f, err := os.Open(path)
	if err != nil {
		return rep, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rep, err
	}
	fr, err := filecheck.Check(f, fi.Size(), true)
	rep.PageSize, rep.Pages = fr.PageSize, fr.Pages
	for _, w := range fr.Warnings {
		rep.problem("%s", w)
	}
	if err != nil {
		rep.problem("%v", err)
		return rep, nil // bbolt's check would follow the damage
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			rep.problem("bbolt: %v", err)
		}
		return nil
	})
	if err != nil || len(rep.Problems) > 0 {
		return rep, err
	}
	return rep, s.db.View(func(tx *bolt.Tx) error { return verifyData(ctx, tx, &rep) })
}

// verifyData checks the store's data in tx; problems go to rep, and an
// error stops the check.
func verifyData(ctx context.Context, tx *bolt.Tx, rep *VerifyReport) error {
	for _, b := range allBuckets {
		if tx.Bucket(b) == nil {
			rep.problem("the file has no bucket %s", b)
			return nil
		}
	}
	m := tx.Bucket(bMeta)
	if v := m.Get(kFormat); len(v) != 1 || v[0] != formatVersion {
		rep.problem("meta: the format marker is %x, want %x", v, formatVersion)
	}
	if v := m.Get(kRev); v != nil && len(v) != 8 {
		rep.problem("meta: the revision is %d bytes long, want 8", len(v))
	}
	rep.Revision = readRev(tx)
	logStart := uint64(1)
	if v := m.Get(kLogStart); len(v) != 8 {
		rep.problem("meta: the changelog start is %d bytes long, want 8", len(v))
	} else {
		logStart = binary.BigEndian.Uint64(v)
		if logStart > uint64(rep.Revision)+1 {
			rep.problem("meta: the changelog starts at revision %d, after the store's revision %d", logStart, rep.Revision)
		}
	}
	st, err := loadState(tx)
	if err != nil {
		rep.problem("%v", err)
		return nil // the keys cannot be decoded without the dictionary
	}
	ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
	n, full, err := verifyIndex(ctx, rep, st, bObj, ob, sb, checkObjEntry)
	if full || err != nil {
		return err
	}
	rep.Tuples = n
	ns, full, err := verifyIndex(ctx, rep, st, bSubj, sb, ob, checkSubjEntry)
	if full || err != nil {
		return err
	}
	if ns != n {
		rep.problem("the object-first index holds %d tuples, the subject-first index %d", n, ns)
	}
	c := tx.Bucket(bLog).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			if !rep.problem("log: key %x is not a revision", k) {
				return nil
			}
			continue
		}
		r := binary.BigEndian.Uint64(k)
		if r < logStart || r > uint64(rep.Revision) {
			if !rep.problem("log: revision %d is outside the changelog's %d..%d", r, logStart, rep.Revision) {
				return nil
			}
		}
		if _, err := decodeChangeSet(st.Dict, Revision(r), v); err != nil {
			if !rep.problem("log: revision %d does not decode", r) {
				return nil
			}
		}
	}
	return nil
}

// verifyIndex checks the checksum of every entry of index b (named name)
// and, with entry, that other holds its twin. It returns how many entries
// it read, and full when the report takes no more problems.
func verifyIndex(ctx context.Context, rep *VerifyReport, st *state, name []byte, b, other *bolt.Bucket,
	entry func(*state, *bolt.Bucket, []byte, []byte) (string, []byte)) (n int64, full bool, err error) {
	var sk []byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return n, false, err
			}
		}
		var p string
		if p = checkSum(name, k, v, &rep.Unchecked); p != "" && !rep.problem("%s", p) {
			return n, true, nil
		}
		if p, sk = entry(st, other, k, sk); p != "" && !rep.problem("%s", p) {
			return n, true, nil
		}
	}
	return n, false, nil
}

// checkSum checks index key k of bucket against its value v, the key's
// checksum, counting a key without one in *unchecked. It returns the
// problem, "" when none. Verify and the scrub share it.
func checkSum(bucket, k, v []byte, unchecked *int64) string {
	switch index.CheckEntry(k, v) {
	case index.EntryUnchecked:
		*unchecked++
	case index.EntryBad:
		return fmt.Sprintf("%s: key %x does not match its checksum %x", bucket, k, v)
	}
	return ""
}

// checkObjEntry checks one key of the object-first index: it decodes to a
// tuple, the schema allows that tuple, and the subject-first index holds
// it. It returns the problem ("" when none) and scratch, grown, for the
// next call. Verify and the scrub (scrub.go) share it.
func checkObjEntry(st *state, sb *bolt.Bucket, k, scratch []byte) (string, []byte) {
	t, err := index.DecodeTuple(st.Dict, k)
	if err != nil {
		return fmt.Sprintf("obj: key %x does not decode to a tuple", k), scratch
	}
	if st.Graph != nil {
		if err := st.Graph.ValidateTuple(t); err != nil {
			return fmt.Sprintf("obj: %v", err), scratch
		}
	}
	ids, _ := index.TupleIDs(st.Dict, t)
	scratch = index.AppendSubjKey(scratch[:0], ids, t.Object.ID, t.Subject.ID)
	if sb.Get(scratch) == nil {
		return fmt.Sprintf("subj: the subject-first index lacks %s", t), scratch
	}
	return "", scratch
}

// checkSubjEntry checks one key of the subject-first index: it decodes to
// a tuple and the object-first index holds it (whose own check validates
// it against the schema). Like checkObjEntry, it returns the problem and
// scratch.
func checkSubjEntry(st *state, ob *bolt.Bucket, k, scratch []byte) (string, []byte) {
	n, oid, sid, err := index.DecodeSubjKey(k)
	var t api.Tuple
	if err == nil {
		t, err = index.TupleFromIDs(st.Dict, n, oid, sid)
	}
	if err != nil {
		return fmt.Sprintf("subj: key %x does not decode to a tuple", k), scratch
	}
	scratch = index.AppendObjKey(scratch[:0], n, index.Bstr(oid), index.Bstr(sid))
	if ob.Get(scratch) == nil {
		return fmt.Sprintf("obj: the object-first index lacks %s", t), scratch
	}
	return "", scratch
}
