package datastore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// indexValues calls fn with every key and value of both indexes of the
// closed data file at path.
func indexValues(t *testing.T, path string, fn func(bucket string, k, v []byte)) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for _, b := range []string{"obj", "subj"} {
			if err := tx.Bucket([]byte(b)).ForEach(func(k, v []byte) error { fn(b, k, v); return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIndexValuesAreChecksums: every write path (a write, a one-batch
// import, an import merged from sorted runs, a replica's apply) puts each
// key of both indexes with the CRC-32C of the key as its value.
func TestIndexValuesAreChecksums(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nexus.db")
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	MustDrive(t, s)
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:w#viewer@user:wes")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, strings.NewReader("folder:i1#viewer@user:ivy\n"), datastore.ImportOptions{Format: datastore.FormatText}); err != nil {
		t.Fatal(err)
	}
	var merged strings.Builder
	for i := range 20 {
		fmt.Fprintf(&merged, "folder:m%d#viewer@user:u%d\n", i, i%7)
	}
	if _, err := s.Import(ctx, strings.NewReader(merged.String()), datastore.ImportOptions{Format: datastore.FormatText, BatchSize: 3}); err != nil {
		t.Fatal(err)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyAt(ctx, rev+1, datastore.Batch{Write: datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:r#editor@user:rae")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	n := 0
	indexValues(t, path, func(b string, k, v []byte) {
		n++
		if want := binary.BigEndian.AppendUint32(nil, crc32.Checksum(k, tab)); !bytes.Equal(v, want) {
			t.Errorf("%s: key %x has value %x, want its CRC-32C %x", b, k, v, want)
		}
	})
	if n < 2*24 {
		t.Fatalf("read %d keys, want at least 48", n)
	}
	rep, err := datastore.Verify(ctx, path)
	if err != nil || rep.Unchecked != 0 {
		t.Fatalf("Verify = %+v, %v; want sound with every key checked", rep, err)
	}
}

// TestCheckFindsForgedKey: a byte changed inside a key of a well-formed
// leaf page (user:u5 turned into user:u9) no longer matches the key's
// checksum; the check that reads it fails with ErrCorrupt instead of
// allowing u9, and the store is then unhealthy and refuses writes.
func TestCheckFindsForgedKey(t *testing.T) {
	ctx := context.Background()
	path := forgeSubject(t)
	s := openTemp(t, datastore.Config{Path: path})
	ok, err := fixture.CheckText(ctx, s, "folder:vault", "read", "user:u9")
	var ce *datastore.CorruptError
	if ok || !errors.As(err, &ce) {
		t.Fatalf("check for the forged user:u9 = %v, %v; want a *CorruptError", ok, err)
	}
	t.Logf("check: %v", err)
	if err := s.Health(); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("Health = %v, want ErrCorrupt", err)
	}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:x#viewer@user:bob")}); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("write after the check = %v, want ErrCorrupt", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := datastore.Verify(ctx, path)
	if !errors.Is(err, datastore.ErrCorrupt) || len(rep.Problems) == 0 || !strings.Contains(rep.Problems[0], "checksum") {
		t.Fatalf("Verify = %+v, %v; want the checksum mismatch", rep, err)
	}
	// A listing of the object's tuples reads the key too.
	s = openTemp(t, datastore.Config{Path: path})
	if ts, err := s.Read(ctx, datastore.Filter{ObjectType: "folder", ObjectID: "vault"}); !errors.Is(err, datastore.ErrCorrupt) {
		t.Fatalf("Read = %v, %v; want ErrCorrupt", ts, err)
	}
}

// TestLegacyEmptyValues: a file whose index keys have empty values (as
// written before the checksum) answers as before; Verify and the scrub
// count its keys as unchecked, and a key written again is checked.
func TestLegacyEmptyValues(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nexus.db")
	s, err := datastore.Open(ctx, datastore.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	MustDrive(t, s)
	cases := []struct{ obj, perm, sub string }{
		{"folder:vault", "read", "user:u5"}, {"folder:vault", "read", "user:u9"},
		{"folder:vault", "read", "user:alice"}, {"doc:readme", "read", "user:alice"},
		{"doc:readme", "write", "user:bob"}, {"folder:a", "read", "user:ann"},
	}
	answer := func(s *datastore.BoltStore) string {
		t.Helper()
		var b strings.Builder
		for _, c := range cases {
			ok, err := fixture.CheckText(ctx, s, c.obj, c.perm, c.sub)
			fmt.Fprintf(&b, "%s#%s@%s=%v,%v\n", c.obj, c.perm, c.sub, ok, err)
		}
		return b.String()
	}
	want := answer(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := 0
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range []string{"obj", "subj"} {
			b := tx.Bucket([]byte(name))
			var ks [][]byte
			if err := b.ForEach(func(k, _ []byte) error { ks = append(ks, bytes.Clone(k)); return nil }); err != nil {
				return err
			}
			for _, k := range ks {
				if err := b.Put(k, nil); err != nil {
					return err
				}
			}
			keys += len(ks)
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	rep, err := datastore.Verify(ctx, path)
	if err != nil || rep.Unchecked != int64(keys) {
		t.Fatalf("Verify of the legacy file = %+v, %v; want sound with %d keys unchecked", rep, err, keys)
	}
	s = openTemp(t, datastore.Config{Path: path})
	if got := answer(s); got != want {
		t.Fatalf("legacy file answers\n%s\nwant\n%s", got, want)
	}
	if _, err := s.Write(ctx, datastore.WriteRequest{Touches: fixture.Tuples(t, "folder:new#viewer@user:nia")}); err != nil {
		t.Fatal(err)
	}
	if ok, err := fixture.CheckText(ctx, s, "folder:new", "read", "user:nia"); err != nil || !ok {
		t.Fatalf("check of a new key in a legacy file = %v, %v", ok, err)
	}
	srep, err := s.Scrub(ctx, 0)
	if err != nil || srep.Unchecked != int64(keys) || srep.Entries != int64(keys)+2 {
		t.Fatalf("Scrub = %+v, %v; want %d keys, %d unchecked", srep, err, keys+2, keys)
	}
}
