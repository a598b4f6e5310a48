package filecheck

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// Check reads the structure of a bbolt data file (bbolt's file
// format version 2) page by page, through r, without trusting any of it:
// every offset is checked before it is followed, so a damaged page is an
// error here instead of a panic or a fault in bbolt, which reads the file
// through a memory map.
//
// Every page starts with a 16-byte header: id uint64, flags uint16, count
// uint16, overflow uint32 (the page spans 1+overflow pages). Pages 0 and 1
// are the meta pages; bbolt uses the valid one with the higher
// transaction id. The meta names the root page of the root bucket, the
// free list's page and the high water mark (the number of pages in use or
// free). A branch page holds count elements {pos uint32, ksize uint32,
// pgid uint64}, a leaf page count elements {flags, pos, ksize, vsize
// uint32}, pos counting from the element; keys and values follow the
// elements. A bucket is a leaf element of flag 1 whose value is {root
// pgid uint64, sequence uint64}, followed by the bucket's only page when
// root is 0 (an inline bucket). All leaves of a bucket's tree are at the
// same depth.
//
// The shallow check (Open's) reads both meta pages, the free list, the
// root bucket and the root and branch pages of every bucket, and marks
// the leaves the branches point to without reading them: a few pages in a
// hundred. The deep check (Verify's) reads every page of every tree.
// Both find: a meta page or free list that does not validate, a page
// outside the file or of the wrong type, a page referenced twice (a
// cycle) or both in use and free, an element whose key or value lies
// outside its page, keys out of order within a page, a nested bucket
// where the store keeps none.
func Check(r io.ReaderAt, size int64, deep bool) (Report, error) {
	c := &fileChecker{r: r, size: size, deep: deep}
	err := c.run()
	return c.rep, err
}

// Report is what Check learnt about a file.
type Report struct {
	PageSize  int
	Pages     uint64 // the high water mark
	TxID      uint64 // the transaction of the meta page in force
	PagesRead int
	// Warnings are what a reader of the file should know that is no
	// damage: an invalid newer meta page, which makes bbolt read the file
	// as of the transaction before it.
	Warnings []string
}

const (
	pageHeaderSize = 16
	pageElemSize   = 16
	metaSize       = 64
	flagBranch     = 0x01
	flagLeaf       = 0x02
	flagMeta       = 0x04
	flagFreelist   = 0x10
	leafBucketFlag = 0x01
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	noFreelist     = ^uint64(0)
	maxTreeDepth   = 64
)

type boltMeta struct {
	page                      int
	pageSize                  uint32
	root, freelist, hwm, txid uint64
	err                       error // why the page is invalid
}

func readMeta(b []byte, page int) boltMeta {
	m := boltMeta{page: page}
	if len(b) < pageHeaderSize+metaSize {
		m.err = errors.New("the file ends inside it")
		return m
	}
	le := binary.LittleEndian
	body := b[pageHeaderSize : pageHeaderSize+metaSize]
	m.pageSize = le.Uint32(body[8:])
	m.root, m.freelist, m.hwm, m.txid = le.Uint64(body[16:]), le.Uint64(body[32:]), le.Uint64(body[40:]), le.Uint64(body[48:])
	h := fnv.New64a()
	h.Write(body[:56])
	switch {
	case le.Uint32(body) != boltMagic:
		m.err = errors.New("no bbolt magic number")
	case le.Uint32(body[4:]) != boltVersion:
		m.err = fmt.Errorf("bbolt format version %d, want %d", le.Uint32(body[4:]), boltVersion)
	case h.Sum64() != le.Uint64(body[56:]):
		m.err = errors.New("checksum mismatch")
	}
	return m
}

type fileChecker struct {
	r          io.ReaderAt
	size       int64
	deep       bool
	psz        int
	hwm        uint64
	used, free bitset
	bufs       [][]byte // one page buffer per tree depth
	rep        Report
}

type bitset []uint64

func (b bitset) has(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i uint64)      { b[i/64] |= 1 << (i % 64) }

func (c *fileChecker) read(off int64, n int) ([]byte, error) {
	b := make([]byte, n)
	m, err := c.r.ReadAt(b, off)
	if m == n {
		return b, nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return b[:m], err
}

func (c *fileChecker) run() error {
	if c.size < 2048 {
		return fmt.Errorf("the file is %d bytes long, too short for two meta pages", c.size)
	}
	b0, err := c.read(0, pageHeaderSize+metaSize)
	if err != nil {
		return err
	}
	m0 := readMeta(b0, 0)
	if m0.err == nil {
		c.psz = int(m0.pageSize)
	} else {
		// As bbolt does: the page size is in meta page 1, which is one
		// page into the file.
		for sz := int64(1024); sz <= 1<<24 && sz < c.size-1024; sz <<= 1 {
			b, err := c.read(sz, pageHeaderSize+metaSize)
			if err != nil {
				break
			}
			if m := readMeta(b, 1); m.err == nil {
				c.psz = int(m.pageSize)
				break
			}
		}
	}
	if c.psz == 0 {
		return fmt.Errorf("both meta pages are invalid: meta page 0: %v", m0.err)
	}
	if c.psz < 1024 || c.psz > 1<<24 || c.psz&(c.psz-1) != 0 {
		return fmt.Errorf("the meta page gives an invalid page size %d", c.psz)
	}
	c.rep.PageSize = c.psz
	b1, err := c.read(int64(c.psz), pageHeaderSize+metaSize)
	if err != nil {
		return err
	}
	m1 := readMeta(b1, 1)
	// The meta page in force, as bbolt chooses it.
	a, b := m0, m1
	if m1.txid > m0.txid {
		a, b = m1, m0
	}
	m := a
	switch {
	case a.err == nil && b.err == nil:
		if a.pageSize != b.pageSize {
			return fmt.Errorf("the meta pages disagree on the page size: %d and %d", a.pageSize, b.pageSize)
		}
	case a.err == nil:
		c.warnMeta(b, a)
	case b.err == nil:
		m = b
		c.warnMeta(a, b)
	default:
		return fmt.Errorf("both meta pages are invalid: meta page 0: %v; meta page 1: %v", m0.err, m1.err)
	}
	c.rep.TxID, c.rep.Pages, c.hwm = m.txid, m.hwm, m.hwm
	switch {
	case m.hwm < 4:
		return fmt.Errorf("meta page %d counts %d pages, fewer than a bbolt file has", m.page, m.hwm)
	case m.hwm > uint64(c.size)/uint64(c.psz):
		return fmt.Errorf("meta page %d counts %d pages of %d bytes, the file holds %d bytes (truncated?)", m.page, m.hwm, c.psz, c.size)
	case m.root < 2 || m.root >= m.hwm:
		return fmt.Errorf("meta page %d: the root bucket's page %d is outside pages 2..%d", m.page, m.root, m.hwm-1)
	case m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.hwm || m.freelist == m.root):
		return fmt.Errorf("meta page %d: the free list's page %d is outside pages 2..%d", m.page, m.freelist, m.hwm-1)
	}
	c.used, c.free = make(bitset, (m.hwm+63)/64), make(bitset, (m.hwm+63)/64)
	c.used.set(0)
	c.used.set(1)
	if m.freelist != noFreelist {
		if err := c.freelist(m.freelist); err != nil {
			return err
		}
	}
	return c.tree(m.root, "", 0)
}

func (c *fileChecker) warnMeta(bad, good boltMeta) {
	c.rep.Warnings = append(c.rep.Warnings, fmt.Sprintf(
		"meta page %d is invalid (%v): the file is read as of transaction %d (meta page %d); if meta page %d held a later transaction, that write is lost",
		bad.page, bad.err, good.txid, good.page, bad.page))
}

// page reads the page id and its overflow pages into the buffer of depth,
// checks its header and marks it used.
func (c *fileChecker) page(id uint64, depth int) ([]byte, error) {
	if id < 2 || id >= c.hwm {
		return nil, fmt.Errorf("page %d is outside pages 2..%d", id, c.hwm-1)
	}
	hdr, err := c.read(int64(id)*int64(c.psz), pageHeaderSize)
	if err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := binary.LittleEndian.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d identifies itself as page %d", id, got)
	}
	over := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if id+over >= c.hwm {
		return nil, fmt.Errorf("page %d: its %d overflow pages run past the last page %d", id, over, c.hwm-1)
	}
	for i := id; i <= id+over; i++ {
		if err := c.use(i); err != nil {
			return nil, err
		}
	}
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, nil)
	}
	n := int(1+over) * c.psz
	if cap(c.bufs[depth]) < n {
		c.bufs[depth] = make([]byte, n)
	}
	buf := c.bufs[depth][:n]
	if m, err := c.r.ReadAt(buf, int64(id)*int64(c.psz)); m != n {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	c.rep.PagesRead++
	return buf, nil
}

// use marks page i in use.
func (c *fileChecker) use(i uint64) error {
	switch {
	case c.free.has(i):
		return fmt.Errorf("page %d is in use and in the free list", i)
	case c.used.has(i):
		return fmt.Errorf("page %d is referenced twice", i)
	}
	c.used.set(i)
	return nil
}

func (c *fileChecker) freelist(id uint64) error {
	p, err := c.page(id, 0)
	if err != nil {
		return fmt.Errorf("free list: %w", err)
	}
	if f := binary.LittleEndian.Uint16(p[8:]); f != flagFreelist {
		return fmt.Errorf("free list: page %d has flags %#x, not a free list's", id, f)
	}
	n, at := uint64(binary.LittleEndian.Uint16(p[10:])), uint64(pageHeaderSize)
	if n == 0xffff { // the count is in the first element
		if len(p) < pageHeaderSize+8 {
			return fmt.Errorf("free list: page %d is too short for its count", id)
		}
		n, at = binary.LittleEndian.Uint64(p[pageHeaderSize:]), at+8
	}
	if n > (uint64(len(p))-at)/8 {
		return fmt.Errorf("free list: page %d counts %d free pages, it has room for %d", id, n, (uint64(len(p))-at)/8)
	}
	for i := range n {
		f := binary.LittleEndian.Uint64(p[at+8*i:])
		switch {
		case f < 2 || f >= c.hwm:
			return fmt.Errorf("free list: free page %d is outside pages 2..%d", f, c.hwm-1)
		case c.free.has(f):
			return fmt.Errorf("free list: page %d is free twice", f)
		case c.used.has(f):
			return fmt.Errorf("free list: page %d is in use and in the free list", f)
		}
		c.free.set(f)
	}
	return nil
}

type pageElem struct {
	flags    uint32
	key, val []byte
	child    uint64
}

// elems decodes the elements of a branch or leaf page, checking that each
// key and value lies in the page, after the elements, and that keys are
// non-empty and increasing.
func elems(id uint64, p []byte, dst []pageElem) ([]pageElem, error) {
	le := binary.LittleEndian
	branch := le.Uint16(p[8:]) == flagBranch
	n := int(le.Uint16(p[10:]))
	data := pageHeaderSize + n*pageElemSize
	if data > len(p) {
		return nil, fmt.Errorf("page %d: %d elements do not fit in %d bytes", id, n, len(p))
	}
	var prev []byte
	for i := range n {
		off := pageHeaderSize + i*pageElemSize
		e := pageElem{}
		var pos, ksz, vsz uint64
		if branch {
			pos, ksz, e.child = uint64(le.Uint32(p[off:])), uint64(le.Uint32(p[off+4:])), le.Uint64(p[off+8:])
		} else {
			e.flags = le.Uint32(p[off:])
			pos, ksz, vsz = uint64(le.Uint32(p[off+4:])), uint64(le.Uint32(p[off+8:])), uint64(le.Uint32(p[off+12:]))
		}
		start := uint64(off) + pos
		switch {
		case ksz == 0:
			return nil, fmt.Errorf("page %d: element %d has an empty key", id, i)
		case start < uint64(data) || start+ksz+vsz > uint64(len(p)):
			return nil, fmt.Errorf("page %d: element %d points outside the page's data", id, i)
		}
		e.key, e.val = p[start:start+ksz], p[start+ksz:start+ksz+vsz]
		if prev != nil && bytes.Compare(prev, e.key) >= 0 {
			return nil, fmt.Errorf("page %d: key %d (%.40x) is not after the key before it", id, i, e.key)
		}
		prev = e.key
		dst = append(dst, e)
	}
	return dst, nil
}

// tree checks the tree of a bucket ("" is the root bucket) from page id.
func (c *fileChecker) tree(id uint64, bucket string, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("bucket %q: the tree is deeper than %d levels", bucket, maxTreeDepth)
	}
	p, err := c.page(id, depth)
	if err != nil {
		return c.inBucket(bucket, err)
	}
	flags := binary.LittleEndian.Uint16(p[8:])
	if flags != flagBranch && flags != flagLeaf {
		return c.inBucket(bucket, fmt.Errorf("page %d has flags %#x, not a branch's or a leaf's", id, flags))
	}
	es, err := elems(id, p, nil)
	if err != nil {
		return c.inBucket(bucket, err)
	}
	if flags == flagLeaf {
		return c.leaf(id, bucket, es, depth)
	}
	if len(es) == 0 {
		return c.inBucket(bucket, fmt.Errorf("branch page %d is empty", id))
	}
	if !c.deep && bucket != "" {
		// Read the branch levels only: the first child says whether
		// this is the last of them.
		hdr, err := c.read(int64(min(es[0].child, c.hwm))*int64(c.psz), pageHeaderSize)
		if err == nil && binary.LittleEndian.Uint16(hdr[8:]) == flagLeaf {
			for _, e := range es {
				if e.child < 2 || e.child >= c.hwm {
					return c.inBucket(bucket, fmt.Errorf("branch page %d points to page %d, outside pages 2..%d", id, e.child, c.hwm-1))
				}
				if err := c.use(e.child); err != nil {
					return c.inBucket(bucket, err)
				}
			}
			return nil
		}
	}
	for _, e := range es {
		if err := c.tree(e.child, bucket, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (c *fileChecker) leaf(id uint64, bucket string, es []pageElem, depth int) error {
	if bucket != "" {
		for i, e := range es {
			if e.flags != 0 {
				return c.inBucket(bucket, fmt.Errorf("page %d: element %d (%.40x) has flags %#x; the store keeps no nested buckets", id, i, e.key, e.flags))
			}
		}
		return nil
	}
	// The root bucket: every element is a bucket. Copy what recursion
	// needs, since it reuses the deeper page buffers.
	type sub struct {
		name   string
		root   uint64
		inline []byte
	}
	subs := make([]sub, 0, len(es))
	for i, e := range es {
		if e.flags != leafBucketFlag || len(e.val) < 16 {
			return fmt.Errorf("root bucket: page %d: element %d (%q) is not a bucket", id, i, e.key)
		}
		sb := sub{name: string(e.key), root: binary.LittleEndian.Uint64(e.val)}
		if sb.root == 0 {
			sb.inline = bytes.Clone(e.val[16:])
		}
		subs = append(subs, sb)
	}
	for _, sb := range subs {
		var err error
		if sb.root == 0 {
			err = c.inline(sb.name, sb.inline)
		} else {
			err = c.tree(sb.root, sb.name, depth+1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inline checks the page of an inline bucket, stored in its value.
func (c *fileChecker) inline(bucket string, p []byte) error {
	if len(p) < pageHeaderSize {
		return c.inBucket(bucket, errors.New("the inline page is too short"))
	}
	if f := binary.LittleEndian.Uint16(p[8:]); f != flagLeaf {
		return c.inBucket(bucket, fmt.Errorf("the inline page has flags %#x, not a leaf's", f))
	}
	es, err := elems(0, p, nil)
	if err != nil {
		return c.inBucket(bucket, fmt.Errorf("inline %w", err))
	}
	return c.leaf(0, bucket, es, 0)
}

func (c *fileChecker) inBucket(bucket string, err error) error {
	if bucket == "" {
		return fmt.Errorf("root bucket: %w", err)
	}
	return fmt.Errorf("bucket %q: %w", bucket, err)
}
