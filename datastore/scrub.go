package datastore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/nexuspdp/nexus/datastore/internal/filecheck"
	bolt "go.etcd.io/bbolt"
)

// ScrubReport is what one scrub pass read.
type ScrubReport struct {
	// Pages is how many pages the page walk read; 0 when a write
	// committed during each of its tries (the keys are checked anyway).
	Pages int
	// Entries is how many keys of the two indexes were checked.
	Entries int64
	// Unchecked is how many of them have no checksum (written before the
	// store kept one): their tuples were checked, their bytes could not be.
	Unchecked int64
}

// scrubChunk is how many keys one read transaction of the scrub checks at
// most; a pass paces its chunks to the rate it is given.
const scrubChunk = 1000

// scrubPageTries is how often the page walk begins again when a write
// commits while it reads the meta pages.
const scrubPageTries = 3

// Scrub checks the open store once while it serves, to find damage that
// no read has met yet (a byte changed inside a well-formed page decodes
// to another tuple, and nothing else notices):
//
//   - the page walk that Verify runs (every page of every tree: headers,
//     element bounds, key order within pages, no page both in use and
//     free), over the file as the transaction in force sees it. bbolt's
//     own Tx.Check is not used: on a read transaction it is not safe
//     beside writers, and on a write transaction it would block them for
//     the whole walk;
//   - then every key of both indexes, as Verify checks them (it decodes
//     to a tuple the schema allows and matches its checksum, and the other
//     index holds the same tuple), and their order, in read transactions of at most 1,000 keys
//     each, paced to at most rate keys a second (rate <= 0: no pause).
//
// Writers are not blocked: each transaction is a reader, and bbolt keeps
// the pages a reader sees until it ends. On the first problem the store
// is marked corrupt, as when a read meets damage: Health reports it and
// writes are refused; Scrub returns the *CorruptError. Unlike damage a
// read meets (a page that does not parse, which other reads avoid), what
// the scrub finds may be a key that reads as another valid tuple, and the
// pass stops at the first one: from then on every read fails with the
// error too, so that no check answers from data that may be forged. A
// store already corrupt returns its error at once.
func (s *BoltStore) Scrub(ctx context.Context, rate int) (rep ScrubReport, err error) {
	if err := s.check(ctx); err != nil {
		return rep, err
	}
	if ce := s.corrupt.Load(); ce != nil {
		return rep, ce
	}
	fail := func(problem string) (ScrubReport, error) {
		ce := &CorruptError{Path: s.cfg.Path, Op: "scrub", Err: fmt.Errorf("%s", problem)}
		var err error = ce
		s.noteCorrupt("scrub", &err)
		s.distrust.CompareAndSwap(nil, ce)
		return rep, err
	}
	start := time.Now()
	pages, problem, err := s.scrubPages()
	if err != nil {
		return rep, err
	}
	if problem != "" {
		return fail(problem)
	}
	rep.Pages = pages
	if err := pause(ctx, time.Since(start)); err != nil { // the walk takes at most half the time
		return rep, err
	}
	var per time.Duration
	if rate > 0 {
		per = time.Second / time.Duration(rate)
	}
	for _, b := range [][]byte{bObj, bSubj} {
		var after []byte
		for {
			t0 := time.Now()
			n, last, problem, err := s.scrubKeys(b, after, &rep.Unchecked)
			rep.Entries += int64(n)
			if err != nil {
				return rep, err
			}
			if problem != "" {
				return fail(problem)
			}
			if last == nil {
				break
			}
			after = last
			if err := pause(ctx, time.Duration(n)*per-time.Since(t0)); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// scrubPages runs the deep page walk (filecheck.Check) inside a read
// transaction, which keeps every page of its tree and of any later one
// from being reused while it lasts. The walk reads the newest meta page;
// when a write committed since the transaction began, the file's size
// may not cover that meta's tree yet, so the walk is discarded and tried
// again (and skipped after scrubPageTries tries).
func (s *BoltStore) scrubPages() (pages int, problem string, err error) {
	defer s.guard("scrub", debug.SetPanicOnFault(true), &err)
	for range scrubPageTries {
		done := false
		err = s.db.View(func(tx *bolt.Tx) error {
			f, err := os.Open(s.cfg.Path)
			if err != nil {
				return err
			}
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			fr, werr := filecheck.Check(f, fi.Size(), true)
			if fr.TxID != uint64(tx.ID()) {
				return nil // a write committed meanwhile
			}
			done, pages = true, fr.PagesRead
			if werr != nil {
				problem = werr.Error()
			}
			return nil
		})
		if err != nil || done {
			return pages, problem, err
		}
	}
	return 0, "", nil
}

// scrubKeys checks up to scrubChunk keys of bucket after the key after
// (from the first when nil) in one read transaction. last is the last key
// checked, nil when the bucket has no more.
func (s *BoltStore) scrubKeys(bucket, after []byte, unchecked *int64) (n int, last []byte, problem string, err error) {
	defer s.guard("scrub", debug.SetPanicOnFault(true), &err)
	err = s.db.View(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				problem = fmt.Sprintf("the file has no bucket %s", b)
				return nil
			}
		}
		st, err := loadState(tx)
		if err != nil {
			problem = err.Error()
			return nil
		}
		ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
		c := tx.Bucket(bucket).Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
		prev := after
		var scratch []byte
		for ; k != nil && n < scrubChunk; k, v = c.Next() {
			n++
			if prev != nil && bytes.Compare(prev, k) >= 0 {
				problem = fmt.Sprintf("%s: key %x is out of order", bucket, k)
				return nil
			}
			p := checkSum(bucket, k, v, unchecked)
			if p != "" {
				problem = p
				return nil
			}
			if bytes.Equal(bucket, bObj) {
				p, scratch = checkObjEntry(st, sb, k, scratch)
			} else {
				p, scratch = checkSubjEntry(st, ob, k, scratch)
			}
			if p != "" {
				problem = p
				return nil
			}
			prev = k
		}
		if k != nil {
			last = bytes.Clone(prev)
		}
		return nil
	})
	return n, last, problem, err
}
