package datastore

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// mergeChunk is the number of tuples per transaction when an import
// merges its sorted runs into the store.
const mergeChunk = 250_000

// run is one sorted batch spilled to two temporary files.
type run struct {
	obj, subj string
	n         int
}

func (r *run) remove() {
	_ = os.Remove(r.obj)
	_ = os.Remove(r.subj)
}

func writeRun(dir string, keys [][]byte) (string, error) {
	f, err := os.CreateTemp(dir, ".nexus-import-*")
	if err != nil {
		return "", err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	var lb [binary.MaxVarintLen64]byte
	var prev []byte
	for _, k := range keys {
		if bytes.Equal(k, prev) {
			continue
		}
		prev = k
		bw.Write(lb[:binary.PutUvarint(lb[:], uint64(len(k)))])
		bw.Write(k)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func (s *BoltStore) spill(b *importBatch) (*run, error) {
	slices.SortFunc(b.objKeys, bytes.Compare)
	slices.SortFunc(b.subKeys, bytes.Compare)
	dir := filepath.Dir(s.cfg.Path)
	o, err := writeRun(dir, b.objKeys)
	if err != nil {
		return nil, err
	}
	sb, err := writeRun(dir, b.subKeys)
	if err != nil {
		os.Remove(o)
		return nil, err
	}
	return &run{obj: o, subj: sb, n: b.tuples}, nil
}

type runReader struct {
	f   *os.File
	br  *bufio.Reader
	cur []byte
}

func (r *runReader) next() (bool, error) {
	l, err := binary.ReadUvarint(r.br)
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if l > maxLineLen*2 {
		return false, index.ErrBadKey
	}
	if cap(r.cur) < int(l) {
		r.cur = make([]byte, l, 2*l)
	}
	r.cur = r.cur[:l]
	_, err = io.ReadFull(r.br, r.cur)
	return err == nil, err
}

// merger yields the keys of several sorted runs in order: a heap
// (container/heap) of the runs ordered by their current keys. A heap
// written out for []*runReader merges about 15% less CPU per key
// (BenchmarkMerger: 197 against 231 ns with 40 runs), but an import
// spends its time in bbolt and on disk, and BenchmarkImport shows no
// difference, so the standard heap it is.
type merger struct {
	rs   runHeap
	last []byte
}

// runHeap orders runs by their current key.
type runHeap []*runReader

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return bytes.Compare(h[i].cur, h[j].cur) < 0 }
func (h runHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)        { *h = append(*h, x.(*runReader)) }

func (h *runHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

func newMerger(paths []string) (*merger, error) {
	m := &merger{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			m.close()
			return nil, err
		}
		r := &runReader{f: f, br: bufio.NewReaderSize(f, 256<<10)}
		ok, err := r.next()
		if err != nil {
			f.Close()
			m.close()
			return nil, err
		}
		if ok {
			m.rs = append(m.rs, r)
		} else {
			f.Close()
		}
	}
	heap.Init(&m.rs)
	return m, nil
}

func (m *merger) close() {
	for _, r := range m.rs {
		r.f.Close()
	}
	m.rs = nil
}

// next returns the next key (valid until the following call) or nil.
func (m *merger) next() ([]byte, error) {
	if len(m.rs) == 0 {
		return nil, nil
	}
	r := m.rs[0]
	m.last = append(m.last[:0], r.cur...)
	ok, err := r.next()
	if err != nil {
		return nil, err
	}
	if ok {
		heap.Fix(&m.rs, 0)
	} else {
		r.f.Close()
		heap.Pop(&m.rs)
	}
	return m.last, nil
}

func (s *BoltStore) mergeRuns(ctx context.Context, st *state, runs []*run, stats *ImportStats, progress func(ImportStats)) error {
	var objPaths, subjPaths []string
	for _, r := range runs {
		objPaths = append(objPaths, r.obj)
		subjPaths = append(subjPaths, r.subj)
	}
	om, err := newMerger(objPaths)
	if err != nil {
		return fmt.Errorf("datastore: import: %w", err)
	}
	defer om.close()
	sm, err := newMerger(subjPaths)
	if err != nil {
		return fmt.Errorf("datastore: import: %w", err)
	}
	defer sm.close()
	var prevObj, prevSubj []byte
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done := false
		n := 0
		rev, err := s.importTx(st, func(tx *bolt.Tx, log []byte) ([]byte, error) {
			ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
			ob.FillPercent, sb.FillPercent = 1.0, 1.0
			for n < mergeChunk {
				k, err := om.next()
				if err != nil {
					return nil, err
				}
				if k == nil {
					break
				}
				if bytes.Equal(k, prevObj) {
					continue
				}
				prevObj = append(prevObj[:0], k...)
				if err := index.PutEntry(ob, k); err != nil {
					return nil, err
				}
				log = appendChange(log, OpTouch, k)
				n++
			}
			for i := 0; i < n || (n == 0 && i < mergeChunk); i++ {
				k, err := sm.next()
				if err != nil {
					return nil, err
				}
				if k == nil {
					break
				}
				if bytes.Equal(k, prevSubj) {
					i--
					continue
				}
				prevSubj = append(prevSubj[:0], k...)
				if err := index.PutEntry(sb, k); err != nil {
					return nil, err
				}
			}
			if n == 0 && len(om.rs) == 0 && len(sm.rs) == 0 {
				done = true
			}
			return log, nil
		})
		if err != nil {
			return fmt.Errorf("datastore: import: %w", err)
		}
		s.signal()
		stats.Revision = rev
		stats.Batches++
		stats.Tuples += int64(n)
		if progress != nil {
			progress(*stats)
		}
		if done || len(om.rs) == 0 && len(sm.rs) == 0 {
			return nil
		}
	}
}
