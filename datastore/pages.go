package datastore

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// The checks' reads of the obj and subj buckets go through cursor, which
// reads a read-only snapshot's B+tree straight from bbolt's memory map
// (the file format checkFileAt describes, its fields in the machine's
// byte order, as bbolt writes them) and answers as bolt.Cursor's Seek and
// Next do, for the keys only. It exists for how it reads a page that is
// not in the processor's cache: a large file's lower pages are read whole
// before their search (touch), and seekPair descends two trees in
// lockstep, so that the memory reads of one search, and of two
// independent ones, overlap instead of following one another. Every page
// number, element and key is checked against the snapshot's size before
// it is read; a page that fails is reported by a panic, as bbolt reports
// one, which the store's guard turns into a *CorruptError. Every key
// Seek and Next return is checked against its value, the key's checksum
// (entry.go), the same way: a mismatch panics with badEntry.

// maxCursorDepth bounds a descent: bbolt's trees are a few levels deep
// (four hold tens of millions of keys); a deeper one is corrupt.
const maxCursorDepth = 16

// tree is one bucket's B+tree in a read-only snapshot's memory map.
type tree struct {
	base  unsafe.Pointer // page 0
	psz   uintptr        // the page size
	pages uint64         // the pages the snapshot's file holds
	root  uint64         // 0: not readable here (an inline bucket, or no memory map)
	touch int            // the first level whose pages a descent touches (touchDepth)
}

// newTree returns b's tree in tx, a read-only transaction; a zero tree
// (read through bolt.Cursor) when b is nil, inline or tx is writable.
func newTree(tx *bolt.Tx, b *bolt.Bucket) tree {
	if b == nil || tx.Writable() || b.Root() == 0 {
		return tree{}
	}
	info := tx.DB().Info()
	touch := maxCursorDepth // never
	if tx.Size() >= touchFileSize {
		touch = touchDepth
	}
	return tree{
		touch: touch,
		// The memory map's address, which bbolt hands out as a uintptr
		// and keeps in place while a read transaction is open.
		base:  *(*unsafe.Pointer)(unsafe.Pointer(&info.Data)),
		psz:   uintptr(info.PageSize),
		pages: uint64(tx.Size()) / uint64(info.PageSize),
		root:  uint64(b.Root()),
	}
}

// corruptPage is the panic a malformed page raises.
type corruptPage struct {
	id  uint64
	why string
}

func (e corruptPage) String() string { return fmt.Sprintf("page %d: %s", e.id, e.why) }

// page is one checked page: its address, its size (with overflow pages),
// its element count and whether it is a leaf.
type page struct {
	p     unsafe.Pointer
	size  uintptr
	count int
	leaf  bool
}

func (t *tree) page(id uint64) page {
	if id < 2 || id >= t.pages {
		panic(corruptPage{id, "page number outside the file"})
	}
	p := unsafe.Add(t.base, uintptr(id)*t.psz)
	flags := *(*uint16)(unsafe.Add(p, 8))
	count := int(*(*uint16)(unsafe.Add(p, 10)))
	overflow := uint64(*(*uint32)(unsafe.Add(p, 12)))
	switch {
	case *(*uint64)(p) != id:
		panic(corruptPage{id, "page header names another page"})
	case flags != flagBranch && flags != flagLeaf:
		panic(corruptPage{id, fmt.Sprintf("not a branch or leaf page (flags %#x)", flags)})
	case overflow >= t.pages-id:
		panic(corruptPage{id, "overflow past the end of the file"})
	}
	size := uintptr(overflow+1) * t.psz
	if pageHeaderSize+uintptr(count)*pageElemSize > size {
		panic(corruptPage{id, "elements past the end of the page"})
	}
	return page{p: p, size: size, count: count, leaf: flags == flagLeaf}
}

// key is element i's key.
func (pg *page) key(i int) []byte {
	off := pageHeaderSize + uintptr(i)*pageElemSize
	e := unsafe.Add(pg.p, off)
	var pos, n uint32
	if pg.leaf {
		pos, n = *(*uint32)(unsafe.Add(e, 4)), *(*uint32)(unsafe.Add(e, 8))
	} else {
		pos, n = *(*uint32)(e), *(*uint32)(unsafe.Add(e, 4))
	}
	if off+uintptr(pos)+uintptr(n) > pg.size {
		panic(corruptPage{*(*uint64)(pg.p), "key past the end of the page"})
	}
	return unsafe.Slice((*byte)(unsafe.Add(e, pos)), n)
}

// entry is leaf element i's key, checked against its value (the value
// as bbolt lays it out: right after the key, its size in the element's
// last word); a value past the end of the page is a corrupt page, one
// that does not match the key a badEntry panic.
func (pg *page) entry(i int) []byte {
	off := pageHeaderSize + uintptr(i)*pageElemSize
	e := unsafe.Add(pg.p, off)
	pos, n, vn := *(*uint32)(unsafe.Add(e, 4)), *(*uint32)(unsafe.Add(e, 8)), *(*uint32)(unsafe.Add(e, 12))
	if off+uintptr(pos)+uintptr(n)+uintptr(vn) > pg.size {
		panic(corruptPage{*(*uint64)(pg.p), "key or value past the end of the page"})
	}
	k := unsafe.Slice((*byte)(unsafe.Add(e, pos)), n)
	return mustEntry(k, unsafe.Slice((*byte)(unsafe.Add(e, uintptr(pos)+uintptr(n))), vn))
}

// child is branch element i's page number.
func (pg *page) child(i int) uint64 {
	return *(*uint64)(unsafe.Add(pg.p, pageHeaderSize+uintptr(i)*pageElemSize+8))
}

// frame is one level of a cursor's path: a page and the element on it.
type frame struct {
	page
	i int
}

// cursor reads one bucket of a snapshot in key order, through its tree or,
// when that is not readable here, through bolt.Cursor.
type cursor struct {
	bc     *bolt.Cursor
	t      tree
	bucket *bolt.Bucket // the bucket the cursor reads (reused while its snapshot lives)
	path   [maxCursorDepth]frame
	depth  int
}

// use points c at b, whose tree is t; a cursor already on b is kept.
func (c *cursor) use(b *bolt.Bucket, t tree) {
	if c.bucket == b {
		return
	}
	c.bucket, c.t, c.bc, c.depth = b, t, nil, 0
	if t.root == 0 {
		c.bc = b.Cursor()
	}
}

// Seek moves c to the first key at or after k and returns it, nil when
// there is none.
func (c *cursor) Seek(k []byte) []byte {
	if c.bc != nil {
		return mustEntry(c.bc.Seek(k))
	}
	d := descent{c: c, key: k}
	d.start()
	for !d.done {
		d.step()
	}
	return c.settle()
}

// seekPair is a.Seek(ka) and b.Seek(kb) with the two descents' page reads
// interleaved, so their cache misses overlap.
func seekPair(a *cursor, ka []byte, b *cursor, kb []byte) ([]byte, []byte) {
	if a.bc != nil || b.bc != nil || a == b {
		return a.Seek(ka), b.Seek(kb)
	}
	da, db := descent{c: a, key: ka}, descent{c: b, key: kb}
	da.start()
	db.start()
	for !da.done || !db.done {
		if !da.done {
			da.step()
		}
		if !db.done {
			db.step()
		}
	}
	return a.settle(), b.settle()
}

// descent is one search from a tree's root down to a leaf, advanced a
// comparison at a time by step.
type descent struct {
	c      *cursor
	key    []byte
	pg     page
	lo, hi int
	done   bool
}

func (d *descent) start() {
	d.c.depth = 0
	d.load(d.c.t.root)
}

func (d *descent) load(id uint64) {
	if d.c.depth == maxCursorDepth {
		panic(corruptPage{id, "tree deeper than any bbolt writes"})
	}
	d.pg = d.c.t.page(id)
	d.lo, d.hi = 0, d.pg.count
	if d.c.depth >= d.c.t.touch {
		touch(&d.pg)
	}
}

// touchDepth is the first level of a large store's trees whose pages a
// descent reads whole before its search. The root and its children are a
// few dozen pages that stay in the processor's cache; below them, in a
// file larger than the caches, a page is most often not cached, and a
// binary search over it waits for one memory read after another (an
// element, then its key, a dozen times on a leaf). Reading the page's
// cache lines first issues those reads together, so that they overlap:
// two cold searches take about 30% less time (BenchmarkCursorSeek). A
// cached page costs about 25 ns more, so a file under touchFileSize,
// which the caches may well hold, is not touched.
const (
	touchDepth    = 2
	touchFileSize = 64 << 20
)

// touch reads one word of each 64-byte cache line in pg's first 4 KiB:
// the whole page where pages are 4 KiB (bbolt uses the system's page
// size), the part a search reads first where they are larger.
func touch(pg *page) {
	n := min(pg.size, 4096)
	var s uint64
	for off := uintptr(0); off+8*64 <= n; off += 8 * 64 {
		p := unsafe.Add(pg.p, off)
		s |= *(*uint64)(p) | *(*uint64)(unsafe.Add(p, 64)) | *(*uint64)(unsafe.Add(p, 128)) | *(*uint64)(unsafe.Add(p, 192)) |
			*(*uint64)(unsafe.Add(p, 256)) | *(*uint64)(unsafe.Add(p, 320)) | *(*uint64)(unsafe.Add(p, 384)) | *(*uint64)(unsafe.Add(p, 448))
	}
	runtime.KeepAlive(s) // the reads are the point: keep them
}

// step makes one comparison on the current page, or, when its search has
// ended, records the page in the cursor's path and goes down a level.
// On a leaf it finds the first key at or after the key sought; on a
// branch the last element whose key is at or before it (or the first).
func (d *descent) step() {
	if d.lo < d.hi {
		m := int(uint(d.lo+d.hi) >> 1)
		cmp := bytes.Compare(d.pg.key(m), d.key)
		if cmp < 0 || (cmp == 0 && !d.pg.leaf) {
			d.lo = m + 1
		} else {
			d.hi = m
		}
		return
	}
	c := d.c
	if d.pg.leaf {
		c.path[c.depth] = frame{d.pg, d.lo}
		c.depth++
		d.done = true
		return
	}
	i := max(d.lo-1, 0)
	if d.pg.count == 0 {
		panic(corruptPage{*(*uint64)(d.pg.p), "empty branch page"})
	}
	c.path[c.depth] = frame{d.pg, i}
	c.depth++
	d.load(d.pg.child(i))
}

// settle returns the key a finished descent landed on, moving to the next
// leaf when it landed past its leaf's last key.
func (c *cursor) settle() []byte {
	f := &c.path[c.depth-1]
	if f.i < f.count {
		return f.entry(f.i)
	}
	return c.advance()
}

// Next moves c to the key after the current one and returns it, nil at
// the end of the bucket.
func (c *cursor) Next() []byte {
	if c.bc != nil {
		return mustEntry(c.bc.Next())
	}
	if c.depth == 0 {
		return nil
	}
	f := &c.path[c.depth-1]
	if f.i+1 < f.count {
		f.i++
		return f.entry(f.i)
	}
	return c.advance()
}

// advance moves c from the end of its leaf to the first key of the next
// non-empty leaf; nil (and the cursor left at the end) when there is none.
func (c *cursor) advance() []byte {
	for {
		d := c.depth - 1
		for d >= 0 && c.path[d].i+1 >= c.path[d].count {
			d--
		}
		if d < 0 {
			f := &c.path[c.depth-1]
			f.i = f.count // at the end: Next stays there
			return nil
		}
		c.path[d].i++
		c.depth = d + 1
		for f := &c.path[c.depth-1]; !f.leaf; f = &c.path[c.depth-1] {
			switch {
			case c.depth == maxCursorDepth:
				panic(corruptPage{*(*uint64)(f.p), "tree deeper than any bbolt writes"})
			case f.count == 0:
				panic(corruptPage{*(*uint64)(f.p), "empty branch page"})
			}
			c.path[c.depth] = frame{c.t.page(f.child(f.i)), 0}
			c.depth++
		}
		if f := &c.path[c.depth-1]; f.count > 0 {
			return f.entry(0)
		}
	}
}
