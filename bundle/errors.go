package bundle

import "errors"

// ErrInvalid is returned (wrapped, with detail) by Read when the archive is
// not a well-formed nexus/OPA wasm bundle.
var ErrInvalid = errors.New("bundle: invalid bundle")

// ErrTooLarge is returned (possibly wrapped, with detail) by Read when the
// archive or one of its files exceeds [MaxBytes].
var ErrTooLarge = errors.New("bundle: bundle too large")
