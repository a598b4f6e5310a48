package datastore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nexuspdp/nexus/api"
	bolt "go.etcd.io/bbolt"
)

// Format is a tuple file format for Import and Export.
type Format string

// Tuple file formats.
const (
	// FormatNDJSON is one JSON object per line:
	// {"object":"folder:d1","relation":"viewer","subject":"user:alice"}.
	FormatNDJSON Format = "ndjson"
	// FormatCSV is object,relation,subject per line; a first line
	// "object,relation,subject" is a header and skipped.
	FormatCSV Format = "csv"
	// FormatText is one tuple per line in the api text syntax; blank lines
	// and lines starting with '#' or "//" are skipped.
	FormatText Format = "text"
)

// FormatForPath picks a format from a file name's extension: .csv is CSV,
// .txt and .tuples are text, anything else NDJSON.
func FormatForPath(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return FormatCSV
	case ".txt", ".tuples":
		return FormatText
	}
	return FormatNDJSON
}

// ParseFormat accepts "ndjson", "json", "csv" and "text".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "ndjson", "json", "jsonl":
		return FormatNDJSON, nil
	case "csv":
		return FormatCSV, nil
	case "text", "txt", "tuples":
		return FormatText, nil
	}
	return "", fmt.Errorf("datastore: unknown format %q (want ndjson, csv or text)", s)
}

// DefaultImportBatch is the number of tuples an import sorts at once (and
// commits at once when the input is no larger).
const DefaultImportBatch = 500_000

// MaxLineLen bounds one line of an import file.
const MaxLineLen = 4096

// ImportOptions configures Import.
type ImportOptions struct {
	// Format of the input; empty means FormatNDJSON.
	Format Format
	// BatchSize is the number of tuples per write transaction; zero means
	// DefaultImportBatch.
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
// then merged into the indexes in key order, DefaultMergeChunk tuples per
// transaction, which keeps bbolt's pages full and its writes sequential.
// Each transaction adds one revision whose change set lists its tuples.
//
// At the first invalid line Import stops with an *ImportError naming it,
// before anything was written: the store is as it was before the import.
func (s *BoltStore) Import(ctx context.Context, r io.Reader, opts ImportOptions) (ImportStats, error) {
	var stats ImportStats
	if err := s.check(ctx); err != nil {
		return stats, err
	}
	if s.cfg.ReadOnly {
		return stats, errors.New("datastore: import: store opened read-only")
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
	if st.schema == nil {
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

// DefaultMergeChunk is the number of tuples per transaction when an import
// merges its sorted runs into the store.
const DefaultMergeChunk = 250_000

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
	if l > MaxLineLen*2 {
		return false, errBadKey
	}
	if cap(r.cur) < int(l) {
		r.cur = make([]byte, l, 2*l)
	}
	r.cur = r.cur[:l]
	_, err = io.ReadFull(r.br, r.cur)
	return err == nil, err
}

// merger yields the keys of several sorted runs in order (a binary heap
// of the runs' current keys).
type merger struct {
	rs   []*runReader // heap ordered by cur
	last []byte
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
	for i := len(m.rs)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m, nil
}

func (m *merger) down(i int) {
	n := len(m.rs)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && bytes.Compare(m.rs[r].cur, m.rs[l].cur) < 0 {
			c = r
		}
		if bytes.Compare(m.rs[c].cur, m.rs[i].cur) >= 0 {
			return
		}
		m.rs[i], m.rs[c] = m.rs[c], m.rs[i]
		i = c
	}
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
	if !ok {
		r.f.Close()
		last := len(m.rs) - 1
		m.rs[0] = m.rs[last]
		m.rs = m.rs[:last]
	}
	if len(m.rs) > 0 {
		m.down(0)
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
			for n < DefaultMergeChunk {
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
				if err := ob.Put(k, nil); err != nil {
					return nil, err
				}
				log = append(log, byte(OpTouch))
				log = binary.AppendUvarint(log, uint64(len(k)))
				log = append(log, k...)
				n++
			}
			for i := 0; i < n || (n == 0 && i < DefaultMergeChunk); i++ {
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
				if err := sb.Put(k, nil); err != nil {
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

// importTx runs fill in one write transaction that adds a revision whose
// change set fill appends to the given header.
func (s *BoltStore) importTx(st *state, fill func(tx *bolt.Tx, log []byte) ([]byte, error)) (Revision, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.state.Load() != st {
		return 0, errors.New("the schema changed during the import")
	}
	s.writeBegin()
	defer s.writeEnd()
	var rev Revision
	err := s.db.Update(func(tx *bolt.Tx) error {
		enc := binary.AppendUvarint(make([]byte, 0, 1<<16), uint64(time.Now().UnixNano()))
		enc = binary.AppendUvarint(enc, 0)
		enc, err := fill(tx, enc)
		if err != nil {
			return err
		}
		rev, err = s.bumpRev(tx, &ChangeSet{}, enc)
		return err
	})
	return rev, err
}

func (s *BoltStore) commitImport(st *state, b *importBatch) (Revision, error) {
	slices.SortFunc(b.objKeys, bytes.Compare)
	slices.SortFunc(b.subKeys, bytes.Compare)
	return s.importTx(st, func(tx *bolt.Tx, log []byte) ([]byte, error) {
		ob, sb := tx.Bucket(bObj), tx.Bucket(bSubj)
		ob.FillPercent, sb.FillPercent = 0.9, 0.9
		for _, k := range b.objKeys {
			if err := ob.Put(k, nil); err != nil {
				return nil, err
			}
			log = append(log, byte(OpTouch))
			log = binary.AppendUvarint(log, uint64(len(k)))
			log = append(log, k...)
		}
		for _, k := range b.subKeys {
			if err := sb.Put(k, nil); err != nil {
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
		if err == bufio.ErrBufferFull || len(raw) > MaxLineLen {
			fail(&ImportError{Line: int(line + 1), Err: fmt.Errorf("line longer than %d bytes", MaxLineLen)})
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
					perr = st.schema.validateTuple(t)
				}
				if perr != nil {
					fail(&ImportError{Line: int(line), Err: perr})
					return
				}
				n, _ := tupleIDs(st.dict, t)
				start := len(b.arena)
				b.arena = appendObjKey(b.arena, n, t.Object.ID, t.Subject.ID)
				mid := len(b.arena)
				b.arena = appendSubjKey(b.arena, n, t.Object.ID, t.Subject.ID)
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

type jsonTuple struct {
	Object   string `json:"object"`
	Relation string `json:"relation"`
	Subject  string `json:"subject"`
}

// parseLine parses one non-empty line. The tuple aliases line.
func parseLine(f Format, line []byte) (api.Tuple, error) {
	switch f {
	case FormatText:
		return api.ParseTuple(bstr(line))
	case FormatCSV:
		parts := bytes.Split(line, []byte{','})
		if len(parts) != 3 {
			return api.Tuple{}, fmt.Errorf("want 3 comma-separated fields object,relation,subject, got %d", len(parts))
		}
		for i, p := range parts {
			p = bytes.TrimSpace(p)
			if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
				p = p[1 : len(p)-1]
			}
			parts[i] = p
		}
		return tupleFromParts(bstr(parts[0]), bstr(parts[1]), bstr(parts[2]))
	default:
		if o, r, s, ok := fastJSON(line); ok {
			return tupleFromParts(o, r, s)
		}
		var jt jsonTuple
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&jt); err != nil {
			return api.Tuple{}, fmt.Errorf("json: %w", err)
		}
		return tupleFromParts(jt.Object, jt.Relation, jt.Subject)
	}
}

func tupleFromParts(o, r, s string) (api.Tuple, error) {
	obj, err := api.ParseObject(o)
	if err != nil {
		return api.Tuple{}, err
	}
	if !api.ValidName(r) {
		return api.Tuple{}, &api.SyntaxError{Input: r, Msg: "invalid relation name"}
	}
	sub, err := api.ParseSubject(s)
	if err != nil {
		return api.Tuple{}, err
	}
	return api.Tuple{Object: obj, Relation: r, Subject: sub}, nil
}

// fastJSON parses {"object":"..","relation":"..","subject":".."} in any key
// order without escapes; ok is false for anything else.
func fastJSON(b []byte) (o, r, s string, ok bool) {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
			i++
		}
	}
	str := func() (string, bool) {
		if i >= len(b) || b[i] != '"' {
			return "", false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				return "", false
			}
			j++
		}
		if j >= len(b) {
			return "", false
		}
		v := bstr(b[i+1 : j])
		i = j + 1
		return v, true
	}
	ws()
	if i >= len(b) || b[i] != '{' {
		return
	}
	i++
	seen := 0
	for {
		ws()
		k, ok1 := str()
		if !ok1 {
			return
		}
		ws()
		if i >= len(b) || b[i] != ':' {
			return
		}
		i++
		ws()
		v, ok2 := str()
		if !ok2 {
			return
		}
		switch k {
		case "object":
			o, seen = v, seen|1
		case "relation":
			r, seen = v, seen|2
		case "subject":
			s, seen = v, seen|4
		default:
			return
		}
		ws()
		if i < len(b) && b[i] == ',' {
			i++
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			ws()
			return o, r, s, i == len(b) && seen == 7
		}
		return
	}
}

// Export writes every tuple in object-first key order.
func (s *BoltStore) Export(ctx context.Context, w io.Writer, format Format) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if format == "" {
		format = FormatNDJSON
	}
	if _, err := ParseFormat(string(format)); err != nil {
		return 0, err
	}
	d := s.state.Load().dict
	bw := bufio.NewWriterSize(w, 1<<16)
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		if format == FormatCSV {
			if _, err := bw.WriteString("object,relation,subject\n"); err != nil {
				return err
			}
		}
		c := tx.Bucket(bObj).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if n%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			t, err := decodeTuple(d, k)
			if err != nil {
				return err
			}
			switch format {
			case FormatText:
				bw.WriteString(t.String())
			case FormatCSV:
				bw.WriteString(t.Object.String())
				bw.WriteByte(',')
				bw.WriteString(t.Relation)
				bw.WriteByte(',')
				bw.WriteString(t.Subject.String())
			default:
				bw.WriteString(`{"object":"`)
				bw.WriteString(t.Object.String())
				bw.WriteString(`","relation":"`)
				bw.WriteString(t.Relation)
				bw.WriteString(`","subject":"`)
				bw.WriteString(t.Subject.String())
				bw.WriteString(`"}`)
			}
			if err := bw.WriteByte('\n'); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("datastore: export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("datastore: export: %w", err)
	}
	return n, nil
}
