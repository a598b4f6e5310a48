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
