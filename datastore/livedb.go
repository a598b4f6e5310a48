package datastore

import (
	"errors"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// liveDB is the store's bbolt database. Restore replaces it with another
// file while reads go on: a transaction that began on the old database
// finishes on it (closing the old one waits for it), and one that tries
// to begin on the old database after it was closed begins again on the
// new one. Writes hold the store's mutex, which Restore holds too.
type liveDB struct {
	p      atomic.Pointer[bolt.DB]
	noSync atomic.Bool // every database held commits without fsync (Unsync)
}

func newLiveDB(db *bolt.DB) *liveDB {
	l := &liveDB{}
	l.p.Store(db)
	return l
}

// swap makes db current and returns the previous database, still open.
// db commits without fsync if the store's commits do.
func (l *liveDB) swap(db *bolt.DB) *bolt.DB {
	db.NoSync = l.noSync.Load()
	return l.p.Swap(db)
}

// NoSync reports whether commits skip fsync.
func (l *liveDB) NoSync() bool { return l.noSync.Load() }

// SetNoSync makes commits skip fsync, or wait for it again. The caller
// holds the store's mutex, so that no commit runs meanwhile.
func (l *liveDB) SetNoSync(on bool) {
	l.noSync.Store(on)
	l.p.Load().NoSync = on
}

// Sync writes the current database's file out to the disk.
func (l *liveDB) Sync() error { return l.p.Load().Sync() }

// retry reports whether err is the old database refusing to begin a
// transaction after Restore closed it.
func (l *liveDB) retry(db *bolt.DB, err error) bool {
	return errors.Is(err, berrors.ErrDatabaseNotOpen) && l.p.Load() != db
}

func (l *liveDB) View(fn func(*bolt.Tx) error) error {
	for {
		db := l.p.Load()
		// fn runs only in an open transaction, so ErrDatabaseNotOpen
		// comes from beginning one.
		if err := db.View(fn); !l.retry(db, err) {
			return err
		}
	}
}

func (l *liveDB) Update(fn func(*bolt.Tx) error) error {
	for {
		db := l.p.Load()
		if err := db.Update(fn); !l.retry(db, err) {
			return err
		}
	}
}

func (l *liveDB) Begin(writable bool) (*bolt.Tx, error) {
	for {
		db := l.p.Load()
		tx, err := db.Begin(writable)
		if !l.retry(db, err) {
			return tx, err
		}
	}
}

func (l *liveDB) Close() error { return l.p.Load().Close() }

func (l *liveDB) Stats() bolt.Stats { return l.p.Load().Stats() }
