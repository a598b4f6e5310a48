package check

import "errors"

// The errors of the checks, which package datastore returns as its own
// (it documents them): a walk deeper than its limit, no schema written
// yet, and a name the schema does not declare.
var (
	ErrDepthExceeded = errors.New("datastore: check depth limit exceeded")
	ErrNoSchema      = errors.New("datastore: no schema")
	ErrUnknown       = errors.New("datastore: unknown type, relation or permission")
)
