package datastore

import (
	"errors"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Concurrent Writes share one bbolt transaction and one fsync, as with
// bbolt's DB.Batch, but the transaction runs on the goroutine of the Write
// that opened the batch, where DB.Batch runs it on a timer's goroutine: a
// panic of bbolt on a damaged page then reaches that Write's guard, which
// answers every Write of the batch with a *CorruptError, instead of
// ending the process.

const (
	// maxBatchDelay is how long the first Write of a batch waits for
	// others to join it.
	maxBatchDelay = 2 * time.Millisecond
	// maxBatchCalls ends the wait early (bbolt's DefaultMaxBatchSize).
	maxBatchCalls = 1000
)

type writeBatch struct {
	calls []batchCall
	full  chan struct{} // closed when calls reaches maxBatchCalls
}

type batchCall struct {
	fn  func(*bolt.Tx) error
	res chan error // buffered: the leader never waits on a caller
}

// errSolo tells a call whose fn failed in a batch to run alone, so that
// its error is its own and the others commit without it.
var errSolo = errors.New("datastore: run the write alone")

// batch runs fn in a write transaction that concurrent calls share. Like
// DB.Batch, fn may run more than once (when another call of the batch
// fails) and must only change the transaction and its own variables.
func (s *BoltStore) batch(op string, fn func(*bolt.Tx) error) error {
	call := batchCall{fn: fn, res: make(chan error, 1)}
	s.batchMu.Lock()
	if b := s.batchCur; b != nil {
		b.calls = append(b.calls, call)
		if len(b.calls) == maxBatchCalls {
			s.batchCur = nil
			close(b.full)
		}
		s.batchMu.Unlock()
	} else {
		b = &writeBatch{calls: []batchCall{call}, full: make(chan struct{})}
		s.batchCur = b
		s.batchMu.Unlock()
		t := time.NewTimer(maxBatchDelay)
		select {
		case <-t.C:
		case <-b.full:
			t.Stop()
		}
		s.batchMu.Lock()
		if s.batchCur == b {
			s.batchCur = nil
		}
		calls := b.calls
		s.batchMu.Unlock()
		s.runBatch(op, calls)
	}
	err := <-call.res
	if err == errSolo {
		err = s.update(op, fn)
	}
	return err
}

// runBatch commits calls in one transaction and answers each. A call
// whose fn fails is told to run alone, and the others are tried again
// without it.
func (s *BoltStore) runBatch(op string, calls []batchCall) {
	for len(calls) > 0 {
		failed := -1
		err := s.update(op, func(tx *bolt.Tx) error {
			for i, c := range calls {
				if err := c.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed >= 0 && !errors.Is(err, ErrCorrupt) {
			calls[failed].res <- errSolo
			calls = slices.Delete(calls, failed, failed+1)
			continue
		}
		for _, c := range calls {
			c.res <- err
		}
		return
	}
}

// update runs fn in a write transaction of its own, under guard.
func (s *BoltStore) update(op string, fn func(*bolt.Tx) error) (err error) {
	defer s.guard(op, debug.SetPanicOnFault(true), &err)
	return s.db.Update(fn)
}

// view runs fn in a read transaction with the state that describes its
// data (viewState), under guard.
func (s *BoltStore) view(op string, fn func(*bolt.Tx, *state) error) (err error) {
	defer s.guard(op, debug.SetPanicOnFault(true), &err)
	return s.viewState(fn)
}
