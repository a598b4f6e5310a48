package datastore

import bolt "go.etcd.io/bbolt"

// cursor reads one index bucket (obj or subj) of a snapshot in key order
// through bbolt's cursor, and checks every key it returns against its
// checksum (entry.go): a key that does not match panics with badEntry,
// which the store's guard turns into a *CorruptError.
type cursor struct {
	bc     *bolt.Cursor
	bucket *bolt.Bucket // the bucket the cursor reads (reused while its snapshot lives)
}

// use points c at b; a cursor already on b is kept.
func (c *cursor) use(b *bolt.Bucket) {
	if c.bucket == b {
		return
	}
	c.bucket, c.bc = b, b.Cursor()
}

// Seek moves c to the first key at or after k and returns it, nil when
// there is none.
func (c *cursor) Seek(k []byte) []byte { return mustEntry(c.bc.Seek(k)) }

// Next moves c to the key after the current one and returns it, nil at
// the end of the bucket.
func (c *cursor) Next() []byte { return mustEntry(c.bc.Next()) }
