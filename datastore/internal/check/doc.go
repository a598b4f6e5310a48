// Package check is the relationship store's checks: a schema compiled
// into a graph of relations and permissions (Graph), numbered by the
// store's name dictionary, and the walks over the store's two indexes
// that answer from it: a check (does a subject have a permission on an
// object), a subject's roles in a tenant, an object's subjects of one
// relation, and the candidates of a lookup. A Checker reads one read
// snapshot's buckets through the checked cursor of package index and
// keeps the tuples it read for its later calls.
//
// Package datastore is its only user: it owns the storage, the
// snapshots and the state a Checker is given, and returns the errors
// here as its own.
package check
