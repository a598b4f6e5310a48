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
	p atomic.Pointer[bolt.DB]
}

func newLiveDB(db *bolt.DB) *liveDB {
	l := &liveDB{}
	l.p.Store(db)
	return l
}

// swap makes db current and returns the previous database, still open.
func (l *liveDB) swap(db *bolt.DB) *bolt.DB { return l.p.Swap(db) }

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
