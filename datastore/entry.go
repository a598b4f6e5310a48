package datastore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
)

// Each key of the two indexes (the obj and subj buckets) holds as its
// value the CRC-32C (Castagnoli) of the key, 4 bytes big endian, written
// by putEntry, the only way a key enters an index. Every read of an index
// key through the checks' cursor (cursor.go, over bolt.Cursor) compares
// the two before the key is used: a byte changed inside a key of an
// otherwise well-formed page (one tuple turned into another) is then found by the read itself, as a *CorruptError, rather
// than answered from. A key with an empty value was written before the
// checksum existed and is accepted unchecked; it is checked once it is
// written again. Verify and the scrub check every key the same way and
// count the unchecked ones.

// entrySumSize is the size of an index key's value.
const entrySumSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// putEntry puts index key k into b with its checksum as value.
func putEntry(b *bolt.Bucket, k []byte) error {
	v := binary.BigEndian.AppendUint32(make([]byte, 0, entrySumSize), crc32.Checksum(k, castagnoli))
	return b.Put(k, v)
}

// entryState is what checkEntry found.
type entryState uint8

const (
	entryOK        entryState = iota // the value is the key's checksum
	entryUnchecked                   // an empty value: a key written before checksums
	entryBad                         // the value does not match the key
)

// checkEntry compares index key k with its value v.
func checkEntry(k, v []byte) entryState {
	switch len(v) {
	case 0:
		return entryUnchecked
	case entrySumSize:
		if binary.BigEndian.Uint32(v) == crc32.Checksum(k, castagnoli) {
			return entryOK
		}
	}
	return entryBad
}

// badEntry is the panic a cursor raises on an index key that does not
// match its checksum; the store's guard turns it into a *CorruptError.
type badEntry struct {
	key []byte
}

func (e badEntry) String() string {
	return fmt.Sprintf("index key %x does not match its checksum", e.key)
}

// mustEntry returns k after checking it against v, and panics with
// badEntry when they do not match.
func mustEntry(k, v []byte) []byte {
	if k != nil && checkEntry(k, v) == entryBad {
		panic(badEntry{key: append([]byte(nil), k...)})
	}
	return k
}
