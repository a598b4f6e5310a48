package confcheck

import "errors"

// ErrUnknownField reports a field that the target type or schema does not
// declare (a typo, or a field of another version).
var ErrUnknownField = errors.New("confcheck: unknown field")

// ErrInvalid reports a value that decodes but breaks a validation rule.
var ErrInvalid = errors.New("confcheck: invalid configuration")

// ErrReference reports a name that refers to nothing: a cluster, a filter,
// a file.
var ErrReference = errors.New("confcheck: dangling reference")

// ErrUnsafe reports a file that decodes and validates but would not work as
// meant or would open a hole: the authorization service never gets a header
// the policy reads, a client can name its own identity, the admin API is
// reachable without a token, the filter runs on an Envoy too old for it.
var ErrUnsafe = errors.New("confcheck: unsafe or broken configuration")
