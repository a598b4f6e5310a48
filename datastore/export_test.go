package datastore

// SetMaxObjTuples sets how many tuples of one object a check caches (0:
// none, every relation is a seek) and returns a function restoring it.
func SetMaxObjTuples(n int) func() {
	old := maxObjTuples
	maxObjTuples = n
	return func() { maxObjTuples = old }
}
