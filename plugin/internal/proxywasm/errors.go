package proxywasm

import (
	"errors"
	"fmt"
)

// ErrBadPairs is wrapped by errors of ParsePairs: the bytes are not a valid
// ABI header map.
var ErrBadPairs = errors.New("proxywasm: malformed header map")

// ErrNoAllocation is returned when the host reports a buffer the plugin did not
// allocate for it through proxy_on_memory_allocate.
var ErrNoAllocation = errors.New("proxywasm: host returned memory it did not allocate")

// StatusError is a host call that returned a Status other than StatusOK.
type StatusError struct {
	// Call is the name of the host function, e.g. "proxy_http_call".
	Call string
	// Status is what it returned.
	Status Status
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("proxywasm: %s: status %d", e.Call, e.Status)
}

// statusErr returns nil for StatusOK and a *StatusError otherwise.
func statusErr(call string, s Status) error {
	if s == StatusOK {
		return nil
	}
	return &StatusError{Call: call, Status: s}
}
