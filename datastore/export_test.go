package datastore

import (
	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore/internal/check"
)

// CannotHold reports whether a check of perm on obj for sub would be
// answered false without a walk, from the subject's tuples v has kept.
func (v *View) CannotHold(obj api.Object, perm string, sub api.Subject) bool {
	return v.c.CannotHold(obj, perm, sub)
}

// SetMaxObjTuples sets how many tuples of one object a check caches (0:
// none, every relation is a seek) and returns a function restoring it.
func SetMaxObjTuples(n int) func() { return check.SetMaxObjTuples(n) }

// SetShareSnapshots turns the shared read snapshot off (every check then
// begins a bbolt read transaction of its own) and returns a function
// restoring it.
func SetShareSnapshots(on bool) func() {
	old := shareSnapshots
	shareSnapshots = on
	return func() { shareSnapshots = old }
}

// ReadTxCount is the number of read transactions bbolt has begun.
func (s *BoltStore) ReadTxCount() int { return s.db.Stats().TxN }

// SetAfterSchemaCommit makes f run between each schema write's commit
// and the publication of its state, and returns a function restoring it.
func SetAfterSchemaCommit(f func()) func() {
	old := afterSchemaCommit
	afterSchemaCommit = f
	return func() { afterSchemaCommit = old }
}

// ReadsPages reports whether both indexes of the store's current
// snapshot are trees of more than one level (neither inline nor a
// single leaf), so that a search goes down from a branch page.
func (s *BoltStore) ReadsPages() bool {
	sn, own, err := s.acquire()
	if err != nil {
		return false
	}
	defer s.releaseSnap(sn, own)
	return sn.obj != nil && sn.subj != nil && sn.obj.Stats().Depth > 1 && sn.subj.Stats().Depth > 1
}
