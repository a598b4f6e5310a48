package datastore_test

import (
	"hash/crc32"
	"testing"
)

// BenchmarkReadChecksum measures what checking a CRC-32C on read
// adds to a check: per key (a tuple key of the object-first index, about
// 30 bytes, with its checksum kept as the key's value, package index)
// and, for comparison, per 4 KiB page. See RATIONALE.md ("Scrubbing the data
// file, and checksumming each key").
func BenchmarkReadChecksum(b *testing.B) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	for _, bc := range []struct {
		name string
		n    int
	}{{"key-30B", 30}, {"page-4KiB", 4096}} {
		buf := make([]byte, bc.n)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		want := crc32.Checksum(buf, tab)
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(bc.n))
			b.ReportAllocs()
			for b.Loop() {
				if crc32.Checksum(buf, tab) != want {
					b.Fatal("checksum")
				}
			}
		})
	}
}
