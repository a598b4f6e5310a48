package config

import "errors"

// ErrUnsupported marks an OPA setting that nexus recognises and does not
// implement; the error names the setting.
var ErrUnsupported = errors.New("not supported by nexus")
