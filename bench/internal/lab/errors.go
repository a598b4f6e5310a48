package lab

import "errors"

// ErrProfile reports data set parameters the generator cannot honour.
var ErrProfile = errors.New("bench: invalid profile")

// ErrGateFile reports a gate file line that is not a check.
var ErrGateFile = errors.New("bench: invalid gate file")

// ErrGateFailed reports a gate run with at least one wrong decision or
// failed check.
var ErrGateFailed = errors.New("bench: gate failed")

// ErrConfig reports a load or run configuration that makes no sense.
var ErrConfig = errors.New("bench: invalid configuration")
