package bundles

import "errors"

var (
	// ErrTooLarge marks a bundle larger than its size limit, compressed
	// or unpacked.
	ErrTooLarge = errors.New("bundle larger than its size limit")
	// ErrUnsafeArchive marks a bundle archive holding a link, a device or
	// a path outside the bundle.
	ErrUnsafeArchive = errors.New("unsafe bundle archive")
	// ErrVerification marks a bundle whose signature is missing, does not
	// verify, or does not cover its files.
	ErrVerification = errors.New("bundle signature verification failed")
	// ErrDelta marks a delta bundle, which nexus does not apply.
	ErrDelta = errors.New("delta bundles are not supported by nexus")
)
