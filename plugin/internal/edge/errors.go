package edge

import "errors"

// ErrBadConfig is wrapped by every error ParseConfig and Config.Validate
// return: the plugin configuration is unusable and the plugin must not start.
var ErrBadConfig = errors.New("edge: bad plugin configuration")

// ErrBadSnapshot is wrapped by errors of CompileSnapshot and of decoding a
// snapshot reply: the snapshot is ignored and the last good one kept.
var ErrBadSnapshot = errors.New("edge: bad snapshot")
