package index

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
)

// Each key of the two indexes (the obj and subj buckets) holds as its
// value the CRC-32C (Castagnoli) of the key, 4 bytes big endian, written
// by PutEntry, the only way a key enters an index. Every read of an index
// key through the checks' cursor (cursor.go, over bolt.Cursor) compares
// the two before the key is used: a byte changed inside a key of an
// otherwise well-formed page (one tuple turned into another) is then found by the read itself, as a *CorruptError, rather
// than answered from. A key with an empty value was written before the
// checksum existed and is accepted unchecked; it is checked once it is
// written again. Verify and the scrub check every key the same way and
// count the unchecked ones.

// EntrySumSize is the size of an index key's value.
const EntrySumSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PutEntry puts index key k into b with its checksum as value.
func PutEntry(b *bolt.Bucket, k []byte) error {
	v := binary.BigEndian.AppendUint32(make([]byte, 0, EntrySumSize), crc32.Checksum(k, castagnoli))
	return b.Put(k, v)
}

// EntryState is what CheckEntry found.
type EntryState uint8

const (
	EntryOK        EntryState = iota // the value is the key's checksum
	EntryUnchecked                   // an empty value: a key written before checksums
	EntryBad                         // the value does not match the key
)

// CheckEntry compares index key k with its value v.
func CheckEntry(k, v []byte) EntryState {
	switch len(v) {
	case 0:
		return EntryUnchecked
	case EntrySumSize:
		if binary.BigEndian.Uint32(v) == crc32.Checksum(k, castagnoli) {
			return EntryOK
		}
	}
	return EntryBad
}

// BadEntry is the panic a cursor raises on an index key that does not
// match its checksum; the store's guard turns it into a *CorruptError.
type BadEntry struct {
	Key []byte
}

func (e BadEntry) String() string {
	return fmt.Sprintf("index key %x does not match its checksum", e.Key)
}

// MustEntry returns k after checking it against v, and panics with
// BadEntry when they do not match.
func MustEntry(k, v []byte) []byte {
	if k != nil && CheckEntry(k, v) == EntryBad {
		panic(BadEntry{Key: append([]byte(nil), k...)})
	}
	return k
}
