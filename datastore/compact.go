package datastore

import (
	"context"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

// Compact rewrites the data file at path into a fresh file with full pages
// and no free space, then replaces it. Bulk imports leave half-full pages
// and pages freed by copy-on-write; compacting after a large import
// roughly halves the file. The store must not be open. It returns the
// sizes before and after.
func Compact(ctx context.Context, path string) (before, after int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("datastore: compact: %w", err)
	}
	before = fi.Size()
	src, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: defaultOpenTimeout})
	if err != nil {
		return before, 0, fmt.Errorf("datastore: compact: open %s: %w", path, err)
	}
	defer src.Close()
	tmp := path + ".compact"
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return before, 0, fmt.Errorf("datastore: compact: create %s: %w", tmp, err)
	}
	if err := ctx.Err(); err != nil {
		dst.Close()
		os.Remove(tmp)
		return before, 0, err
	}
	if err := bolt.Compact(dst, src, 256<<20); err != nil {
		dst.Close()
		os.Remove(tmp)
		return before, 0, fmt.Errorf("datastore: compact: %w", err)
	}
	dst.NoSync = false
	if err := dst.Sync(); err != nil {
		dst.Close()
		os.Remove(tmp)
		return before, 0, fmt.Errorf("datastore: compact: sync: %w", err)
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return before, 0, fmt.Errorf("datastore: compact: %w", err)
	}
	src.Close()
	if err := os.Rename(tmp, path); err != nil {
		return before, 0, fmt.Errorf("datastore: compact: %w", err)
	}
	if fi, err = os.Stat(path); err == nil {
		after = fi.Size()
	}
	return before, after, err
}
