package api

import (
	"context"
	"fmt"
)

// MaxWriteIDLen bounds a write ID (an Idempotency-Key).
const MaxWriteIDLen = 128

type writeIDKey struct{}

// WithWriteID returns ctx carrying the ID of the write made with it: a
// cluster replica publishes the write under that ID, and a second write
// with the same ID (a retry) gets the first one's outcome instead of being
// applied again.
func WithWriteID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, writeIDKey{}, id)
}

// WriteID returns the write ID ctx carries, or "".
func WriteID(ctx context.Context) string {
	id, _ := ctx.Value(writeIDKey{}).(string)
	return id
}

// ValidWriteID checks a client's write ID (an Idempotency-Key header): 1
// to MaxWriteIDLen printable ASCII characters, no space.
func ValidWriteID(id string) error {
	if id == "" || len(id) > MaxWriteIDLen {
		return fmt.Errorf("a write ID has 1 to %d characters, got %d", MaxWriteIDLen, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("a write ID is printable ASCII without spaces; byte %d is %q", i, c)
		}
	}
	return nil
}
