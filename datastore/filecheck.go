package datastore

import (
	"fmt"
	"os"
	"time"

	"github.com/nexuspdp/nexus/datastore/internal/filecheck"
	bolt "go.etcd.io/bbolt"
)

// checkFile runs the shallow check of filecheck.Check on the open store's
// file. bbolt holds the file's lock, so nobody writes it meanwhile.
func (s *BoltStore) checkFile() error {
	start := time.Now()
	f, err := os.Open(s.cfg.Path)
	if err != nil {
		return fmt.Errorf("datastore: check %s: %w", s.cfg.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("datastore: check %s: %w", s.cfg.Path, err)
	}
	rep, err := filecheck.Check(f, fi.Size(), false)
	if err != nil {
		return &CorruptError{Path: s.cfg.Path, Op: "open", Err: err}
	}
	for _, w := range rep.Warnings {
		s.log.Warn("datastore: "+w, "path", s.cfg.Path)
	}
	var txid int
	if err := s.db.View(func(tx *bolt.Tx) error { txid = tx.ID(); return nil }); err != nil {
		return err
	}
	if uint64(txid) != rep.TxID {
		return &CorruptError{Path: s.cfg.Path, Op: "open", Err: fmt.Errorf("bbolt reads transaction %d, the meta pages say %d", txid, rep.TxID)}
	}
	s.log.Debug("datastore: file checked", "pages", rep.Pages, "read", rep.PagesRead, "took", time.Since(start))
	return nil
}
