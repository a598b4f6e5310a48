package datastore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/nexuspdp/nexus/datastore/internal/index"
	bolt "go.etcd.io/bbolt"
)

// DefaultImportBatch is the number of tuples an import sorts at once (and
// commits at once when the input is no larger).
const DefaultImportBatch = 500_000

// maxLineLen bounds one line of an import file.
const maxLineLen = 4096

// ImportOptions configures Import.
type ImportOptions struct {
	// Format of the input; empty means FormatNDJSON.
	Format Format
	// BatchSize is the number of tuples sorted at once: an input of at
	// most BatchSize tuples is one transaction; a larger one is sorted in
	// runs of BatchSize and merged 250,000 tuples per transaction. Zero
	// means DefaultImportBatch.
	BatchSize int
	// Progress, if set, is called after each batch read and each
	// transaction committed.
	Progress func(ImportStats)
}

// ImportStats counts what an import did.
type ImportStats struct {
	Lines    int64    // lines read (including skipped ones)
	Parsed   int64    // tuples read and validated
	Tuples   int64    // tuples committed
	Batches  int      // write transactions committed
	Revision Revision // revision of the last committed batch
}

type importBatch struct {
	arena   []byte
	objKeys [][]byte
	subKeys [][]byte
	spans   [][3]int // obj key start, subj key start, end in arena
	tuples  int
	lines   int64
	err     error
}

// Import loads tuples from r as touches (existing tuples stay), streaming:
// memory is bounded by the batch size, not by the input.
//
// An input of at most BatchSize tuples is committed in one transaction.
// A larger input is first read, validated and sorted in runs of BatchSize
// tuples spilled to temporary files next to the data file; the runs are
// then merged into the indexes in key order, 250,000 tuples per
// transaction, which keeps bbolt's pages full and its writes sequential.
// Each transaction adds one revision whose change set lists its tuples.
//
// At the first invalid line Import stops with an *ImportError naming it,
// before anything was written: the store is as it was before the import.
// An error while the runs are merged (a full disk, ctx ending) leaves the
// transactions committed before it; ImportStats counts them.
func (s *BoltStore) Import(ctx context.Context, r io.Reader, opts ImportOptions) (ImportStats, error) {
	var stats ImportStats
	if err := s.check(ctx); err != nil {
		return stats, err
	}
	if err := s.writable("import"); err != nil {
		return stats, err
	}
	if opts.Format == "" {
		opts.Format = FormatNDJSON
	}
	if _, err := ParseFormat(string(opts.Format)); err != nil {
		return stats, err
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultImportBatch
	}
	st := s.state.Load()
	if st.Graph == nil {
		return stats, ErrNoSchema
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan *importBatch, 1)
	free := make(chan *importBatch, 2)
	free <- &importBatch{}
	free <- &importBatch{}
	go s.parseImport(ctx, st, r, opts, batches, free)
	defer func() {
		cancel()
		for range batches { // let the parser end
		}
	}()
	var runs []*run
	defer func() {
		for _, r := range runs {
			r.remove()
		}
	}()
	var pending *importBatch // the first batch, kept in memory while it may be the only one
	for b := range batches {
		stats.Lines += b.lines
		if b.err != nil {
			return stats, b.err
		}
		if b.tuples == 0 {
			continue
		}
		stats.Parsed += int64(b.tuples)
		if pending == nil && len(runs) == 0 {
			pending = b
		} else {
			for _, x := range []*importBatch{pending, b} {
				if x == nil {
					continue
				}
				rn, err := s.spill(x)
				if err != nil {
					return stats, fmt.Errorf("datastore: import: %w", err)
				}
				runs = append(runs, rn)
				free <- x
			}
			pending = nil
		}
		if opts.Progress != nil {
			opts.Progress(stats)
		}
	}
	if err := ctx.Err(); err != nil {
		return stats, err
	}
	if pending != nil {
		rev, err := s.commitImport(st, pending)
		if err != nil {
			return stats, fmt.Errorf("datastore: import: %w", err)
		}
		stats.Revision, stats.Batches, stats.Tuples = rev, 1, int64(pending.tuples)
		s.signal()
		if opts.Progress != nil {
			opts.Progress(stats)
		}
		return stats, nil
	}
	if len(runs) == 0 {
		return stats, nil
	}
	err := s.mergeRuns(ctx, st, runs, &stats, opts.Progress)
	return stats, err
}

func (s *BoltStore) commitImport(st *state, b *importBatch) (Revision, error) {
	slices.SortFunc(b.objKeys, bytes.Compare)
	slices.SortFunc(b.subKeys, bytes.Compare)
	return s.importTx(st, func(tx *bolt.Tx, log []byte) ([]byte, error) {
		ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
		ob.FillPercent, sb.FillPercent = 0.9, 0.9
		for _, k := range b.objKeys {
			if err := index.PutEntry(ob, k); err != nil {
				return nil, err
			}
			log = appendChange(log, OpTouch, k)
		}
		for _, k := range b.subKeys {
			if err := index.PutEntry(sb, k); err != nil {
				return nil, err
			}
		}
		return log, nil
	})
}

func (s *BoltStore) parseImport(ctx context.Context, st *state, r io.Reader, opts ImportOptions, out chan<- *importBatch, free chan *importBatch) {
	defer close(out)
	br := bufio.NewReaderSize(r, 1<<20)
	var line int64
	next := func() *importBatch {
		var b *importBatch
		select {
		case b = <-free:
		case <-ctx.Done():
			return nil
		}
		b.arena, b.objKeys, b.subKeys, b.spans, b.tuples, b.lines, b.err = b.arena[:0], b.objKeys[:0], b.subKeys[:0], b.spans[:0], 0, 0, nil
		return b
	}
	b := next()
	if b == nil {
		return
	}
	send := func() bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	fail := func(err error) {
		b.err = err
		send()
	}
	csvHeader := opts.Format == FormatCSV
	for {
		raw, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull || len(raw) > maxLineLen {
			fail(&ImportError{Line: int(line + 1), Err: fmt.Errorf("line longer than %d bytes", maxLineLen)})
			return
		}
		if err != nil && err != io.EOF {
			fail(fmt.Errorf("datastore: import: read: %w", err))
			return
		}
		if len(raw) > 0 {
			line++
			b.lines++
			text := bytes.TrimSpace(raw)
			if csvHeader {
				csvHeader = false
				if string(text) == "object,relation,subject" {
					goto next
				}
			}
			if len(text) == 0 || opts.Format == FormatText && (text[0] == '#' || bytes.HasPrefix(text, []byte("//"))) {
				goto next
			}
			{
				t, perr := parseLine(opts.Format, text)
				if perr == nil {
					perr = st.Graph.ValidateTuple(t)
				}
				if perr != nil {
					fail(&ImportError{Line: int(line), Err: perr})
					return
				}
				n, _ := index.TupleIDs(st.Dict, t)
				start := len(b.arena)
				b.arena = index.AppendObjKey(b.arena, n, t.Object.ID, t.Subject.ID)
				mid := len(b.arena)
				b.arena = index.AppendSubjKey(b.arena, n, t.Object.ID, t.Subject.ID)
				// Keys are offsets until the batch is complete: the arena may move.
				b.spans = append(b.spans, [3]int{start, mid, len(b.arena)})
				b.tuples++
			}
		}
	next:
		if b.tuples >= opts.BatchSize || err == io.EOF {
			resolve(b)
			if !send() {
				return
			}
			if err == io.EOF {
				return
			}
			if b = next(); b == nil {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func resolve(b *importBatch) {
	for _, sp := range b.spans {
		b.objKeys = append(b.objKeys, b.arena[sp[0]:sp[1]:sp[1]])
		b.subKeys = append(b.subKeys, b.arena[sp[1]:sp[2]:sp[2]])
	}
}
