package policyload

import "errors"

// ErrUnsafeEntry is returned (wrapped, naming the entry) when an archive
// holds a link, a device or a name that climbs out of the archive. It also
// matches [bundle.ErrInvalid].
var ErrUnsafeEntry = errors.New("unsafe archive entry")

// ErrDeltaBundle is returned (wrapped) for an OPA delta bundle (one with a
// patch.json), which describes changes to data rather than a policy. It
// also matches [bundle.ErrInvalid].
var ErrDeltaBundle = errors.New("delta bundles are not supported")

// ErrMixedRegoVersions is returned (wrapped, naming two files) when the
// Rego files of one bundle are not all of the same Rego version.
var ErrMixedRegoVersions = errors.New("the bundle mixes Rego v0 and v1 files")
