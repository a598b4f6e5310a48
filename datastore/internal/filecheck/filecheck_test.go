package filecheck_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/nexuspdp/nexus/datastore/internal/filecheck"
	bolt "go.etcd.io/bbolt"
)

// boltFile writes a small bbolt file with one bucket and returns its bytes.
func boltFile(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("obj"))
		if err != nil {
			return err
		}
		for i := range 1000 {
			if err := b.Put([]byte{byte(i >> 8), byte(i)}, bytes.Repeat([]byte{'v'}, 20)); err != nil {
				return err
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
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheck(t *testing.T) {
	good := boltFile(t)
	tests := []struct {
		name    string
		file    func() []byte
		wantErr bool
	}{
		{name: "sound", file: func() []byte { return good }},
		{name: "too short", file: func() []byte { return good[:1000] }, wantErr: true},
		{name: "truncated", file: func() []byte { return good[:len(good)/2] }, wantErr: true},
		{name: "both metas damaged", file: func() []byte {
			b := bytes.Clone(good)
			b[16] ^= 0xff // page 0's magic number
			b[int(rep(t, good).PageSize)+16] ^= 0xff
			return b
		}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, deep := range []bool{false, true} {
				b := tt.file()
				_, err := filecheck.Check(bytes.NewReader(b), int64(len(b)), deep)
				if (err != nil) != tt.wantErr {
					t.Errorf("deep %v: err = %v, want an error: %v", deep, err, tt.wantErr)
				}
			}
		})
	}
	r := rep(t, good)
	if r.PagesRead == 0 || r.Pages == 0 || r.TxID == 0 || len(r.Warnings) > 0 {
		t.Errorf("report of a sound file: %+v", r)
	}
}

func rep(t *testing.T, b []byte) filecheck.Report {
	t.Helper()
	r, err := filecheck.Check(bytes.NewReader(b), int64(len(b)), true)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
