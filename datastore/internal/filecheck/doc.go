// Package filecheck reads the structure of a bbolt data file without
// trusting it: every offset is checked before it is followed, so a
// damaged page is an error here instead of a panic or a fault in bbolt,
// which reads the file through a memory map. The store runs the shallow
// check when it opens a file and the deep one in Verify and Scrub.
//
//	f, _ := os.Open(path)
//	fi, _ := f.Stat()
//	rep, err := filecheck.Check(f, fi.Size(), true) // deep: every page
//
// It reads the file as bbolt's format version 2 lays it out, and knows
// of the store only that it keeps no nested buckets.
//
// # Caveats
//
//   - It checks structure, not content: a flipped bit inside a key or a
//     value that leaves the page well formed is not found here (the store
//     checks its keys against their checksums for that).
//   - The file must not change while it is read: the store holds bbolt's
//     lock, or a read transaction, meanwhile.
package filecheck
