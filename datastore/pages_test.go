package datastore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// pageTestDB writes a bbolt file with two large buckets of keys shaped
// like the store's (shared prefixes, a type number, IDs), a few keys
// long enough to need overflow pages, and a bucket small enough to be
// stored inline.
func pageTestDB(t *testing.T) (path string, keys map[string][][]byte) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "p.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	keys = map[string][][]byte{}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"a", "b", "tiny"} {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			n := 30000
			if name == "tiny" {
				n = 3
			}
			for i := range n {
				k := fmt.Appendf(nil, "%c%s%d\x00%c", byte(1+r.IntN(3)), strings.Repeat("x", r.IntN(40)), r.IntN(1e6), byte(r.IntN(256)))
				if name == "a" && i%5000 == 0 {
					k = append(k, bytes.Repeat([]byte{'L'}, 5000+r.IntN(9000))...) // overflow pages
				}
				if err := b.Put(k, nil); err != nil {
					return err
				}
				keys[name] = append(keys[name], k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path, keys
}

// readTx opens path read-only and begins a read transaction, both ended
// when the test is.
func readTx(t *testing.T, path string) *bolt.Tx {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// probes are keys to seek: stored keys, their neighbours and prefixes,
// random bytes, and both ends.
func probes(r *rand.Rand, stored [][]byte) [][]byte {
	out := [][]byte{nil, {}, {0}, bytes.Repeat([]byte{0xff}, 20)}
	for range 3000 {
		k := bytes.Clone(stored[r.IntN(len(stored))])
		switch r.IntN(5) {
		case 1:
			k[len(k)-1]++
		case 2:
			k[len(k)-1]--
		case 3:
			k = k[:r.IntN(len(k)+1)]
		case 4:
			k = fmt.Appendf(nil, "%x", r.Uint64())
		}
		out = append(out, k)
	}
	return out
}

// TestCursorAgreesWithBolt seeks and steps cursor and bolt.Cursor over
// the same trees and requires the same keys, one descent at a time and
// two in lockstep.
func TestCursorAgreesWithBolt(t *testing.T) {
	path, keys := pageTestDB(t)
	tx := readTx(t, path)
	ba, bb, bt := tx.Bucket([]byte("a")), tx.Bucket([]byte("b")), tx.Bucket([]byte("tiny"))
	ta, tb, tt := newTree(tx, ba), newTree(tx, bb), newTree(tx, bt)
	if ta.root == 0 || tb.root == 0 || tt.root != 0 {
		t.Fatalf("roots %d %d %d: want two trees and an inline bucket", ta.root, tb.root, tt.root)
	}
	var ca, cb, ct cursor
	ca.use(ba, ta)
	cb.use(bb, tb)
	ct.use(bt, tt)
	if ca.bc != nil || cb.bc != nil || ct.bc == nil {
		t.Fatal("the large buckets must be read from their pages, the inline one through bbolt")
	}
	// depth is how many levels the trees have: the test needs branches.
	var depth int
	ca.Seek(nil)
	depth = ca.depth
	if depth < 3 {
		t.Fatalf("tree a is %d levels deep; the test needs at least 3", depth)
	}

	// same steps c and its bbolt twin from keys k and want n more keys.
	same := func(c *cursor, bc *bolt.Cursor, k, want []byte, n int) {
		t.Helper()
		if !bytes.Equal(k, want) {
			t.Fatalf("seek: %q, bbolt %q", k, want)
		}
		for i := range n {
			got := c.Next()
			w, _ := bc.Next()
			if !bytes.Equal(got, w) {
				t.Fatalf("next %d: %q, bbolt %q", i, got, w)
			}
			if w == nil {
				if c.Next() != nil {
					t.Fatal("a cursor at the end moved on")
				}
				return
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	boltA, boltB, boltT := ba.Cursor(), bb.Cursor(), bt.Cursor()
	pa, pb := probes(r, keys["a"]), probes(r, keys["b"])
	for i, k := range pa {
		w, _ := boltA.Seek(k)
		same(&ca, boltA, ca.Seek(k), w, r.IntN(40))
		// Two descents in lockstep, then each cursor goes on alone.
		k2 := pb[i]
		g1, g2 := seekPair(&ca, k, &cb, k2)
		w1, _ := boltA.Seek(k)
		w2, _ := boltB.Seek(k2)
		same(&ca, boltA, g1, w1, r.IntN(20))
		same(&cb, boltB, g2, w2, r.IntN(20))
		w, _ = boltT.Seek(k)
		same(&ct, boltT, ct.Seek(k), w, 4)
	}
	// A whole walk, from before the first key to past the last.
	n := 0
	for k := ca.Seek(nil); k != nil; k = ca.Next() {
		n++
	}
	if n != len(keys["a"]) {
		t.Fatalf("walked %d keys of %d", n, len(keys["a"]))
	}
}

// pageOf returns the number of the page a search for k passes at level
// (0 the root) of tree t, and the element it takes there.
func pageOf(t *testing.T, tr tree, k []byte, level int) (uint64, int) {
	t.Helper()
	var c cursor
	c.t = tr
	c.Seek(k)
	if level >= c.depth-1 {
		t.Fatalf("level %d of a tree %d deep: want a branch", level, c.depth)
	}
	return *(*uint64)(c.path[level].p), c.path[level].i
}

// TestCursorCorruptPage damages one page of a tree at a time and requires
// a corruptPage panic naming it, never a read outside the page or file.
func TestCursorCorruptPage(t *testing.T) {
	path, keys := pageTestDB(t)
	probe := keys["a"][123]
	for _, tc := range []struct {
		name  string
		level int                               // 0 root, 1 its child
		off   func(count, i int) int64          // where in the page to write, i the element taken
		val   func(pageID, pages uint64) []byte // what
		why   string
	}{
		{"child outside the file", 0, func(_, i int) int64 { return pageHeaderSize + int64(i)*pageElemSize + 8 }, func(_, n uint64) []byte { return le64(n + 5) }, "outside the file"},
		{"child is a meta page", 0, func(_, i int) int64 { return pageHeaderSize + int64(i)*pageElemSize + 8 }, func(uint64, uint64) []byte { return le64(1) }, "outside the file"},
		{"header names another page", 1, func(int, int) int64 { return 0 }, func(id, _ uint64) []byte { return le64(id + 1) }, "names another page"},
		{"not a tree page", 1, func(int, int) int64 { return 8 }, func(uint64, uint64) []byte { return []byte{0x10, 0} }, "not a branch or leaf"},
		{"overflow past the end", 1, func(int, int) int64 { return 12 }, func(uint64, uint64) []byte { return []byte{0xff, 0xff, 0xff, 0x7f} }, "overflow past the end"},
		{"more elements than fit", 1, func(int, int) int64 { return 10 }, func(uint64, uint64) []byte { return []byte{0xff, 0xff} }, "elements past the end"},
		{"key past the page", 1, func(c, _ int) int64 { return pageHeaderSize + int64(c/2)*pageElemSize }, func(uint64, uint64) []byte { return le32(1 << 20) }, "key past the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.db")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			tx := readTx(t, p)
			tr := newTree(tx, tx.Bucket([]byte("a")))
			id, i := pageOf(t, tr, probe, tc.level)
			count := int(*(*uint16)(unsafe.Add(unsafe.Add(tr.base, uintptr(id)*tr.psz), 10)))
			// bbolt maps the file shared: the write shows in the map.
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(tc.val(id, tr.pages), int64(id)*int64(tr.psz)+tc.off(count, i)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			defer func() {
				r := recover()
				cp, ok := r.(corruptPage)
				if !ok || !strings.Contains(cp.String(), tc.why) {
					t.Fatalf("recovered %v, want a corrupt page: %s", r, tc.why)
				}
			}()
			var c cursor
			c.t = tr
			for k := c.Seek(probe); k != nil; k = c.Next() {
			}
			t.Fatal("the damaged page was read without a panic")
		})
	}
}

func le64(v uint64) []byte {
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)}
}

func le32(v uint32) []byte { return le64(uint64(v))[:4] }

// BenchmarkCursorSeek seeks two trees of a million keys each (a 160 MB
// file, more than the processor caches) at random keys, as a check seeks
// an object and a subject: through bolt.Cursor, through cursor one after
// the other, and through seekPair; "hot" repeats four keys, every page
// cached.
func BenchmarkCursorSeek(b *testing.B) {
	path := filepath.Join(b.TempDir(), "seek.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const n = 1 << 20
	r := rand.New(rand.NewPCG(3, 4))
	key := func(i int) []byte {
		return fmt.Appendf(nil, "\x02%016x\x00\x03\x00\x01user%08d", uint64(i)*0x9e3779b97f4a7c15, i)
	}
	for _, name := range []string{"obj", "subj"} {
		for lo := 0; lo < n; lo += n / 8 {
			err := db.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte(name))
				if err != nil {
					return err
				}
				bk.FillPercent = 0.9
				for i := lo; i < lo+n/8; i++ {
					if err := bk.Put(key(i), nil); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	tx, err := db.Begin(false)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	bo, bs := tx.Bucket([]byte("obj")), tx.Bucket([]byte("subj"))
	var co, cs, uo, us cursor
	co.use(bo, newTree(tx, bo))
	cs.use(bs, newTree(tx, bs))
	if co.t.touch != touchDepth {
		b.Fatal("a file this large should be touched")
	}
	uo.use(bo, newTree(tx, bo))
	us.use(bs, newTree(tx, bs))
	uo.t.touch, us.t.touch = maxCursorDepth, maxCursorDepth
	bco, bcs := bo.Cursor(), bs.Cursor()
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = key(r.IntN(n))
	}
	for _, hot := range []bool{false, true} {
		pick := func(i int) ([]byte, []byte) {
			if hot {
				return keys[i%4], keys[(i+1)%4]
			}
			return keys[i%len(keys)], keys[(i*7+1)%len(keys)]
		}
		name := map[bool]string{false: "cold", true: "hot"}[hot]
		for _, m := range []struct {
			name string
			seek func(ko, ks []byte)
		}{
			{"bolt", func(ko, ks []byte) { bco.Seek(ko); bcs.Seek(ks) }},
			{"cursor", func(ko, ks []byte) { co.Seek(ko); cs.Seek(ks) }},
			{"untouched", func(ko, ks []byte) { uo.Seek(ko); us.Seek(ks) }},
			{"pair", func(ko, ks []byte) { seekPair(&co, ko, &cs, ks) }},
		} {
			b.Run(name+"/"+m.name, func(b *testing.B) {
				for i := 0; b.Loop(); i++ {
					m.seek(pick(i))
				}
			})
		}
	}
}
