package index

import bolt "go.etcd.io/bbolt"

// Cursor reads one index bucket (obj or subj) of a snapshot in key order
// through bbolt's cursor, and checks every key it returns against its
// checksum (entry.go): a key that does not match panics with BadEntry,
// which the store's guard turns into a *CorruptError.
type Cursor struct {
	bc     *bolt.Cursor
	bucket *bolt.Bucket // the bucket the cursor reads (reused while its snapshot lives)
}

// Use points c at b; a cursor already on b is kept.
func (c *Cursor) Use(b *bolt.Bucket) {
	if c.bucket == b {
		return
	}
	c.bucket, c.bc = b, b.Cursor()
}

// Seek moves c to the first key at or after k and returns it, nil when
// there is none.
func (c *Cursor) Seek(k []byte) []byte { return MustEntry(c.bc.Seek(k)) }

// Next moves c to the key after the current one and returns it, nil at
// the end of the bucket.
func (c *Cursor) Next() []byte { return MustEntry(c.bc.Next()) }
