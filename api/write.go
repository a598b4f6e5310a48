package api

import (
	"context"
	"fmt"
)

// MaxWriteIDLen bounds a write ID (an Idempotency-Key).
const MaxWriteIDLen = 128

type writeIDKey struct{}

type writeIDValue struct {
	id    string
	fresh bool
}

// WithWriteID returns ctx carrying the ID of the write made with it: a
// cluster replica publishes the write under that ID, and a second write
// with the same ID (a retry) gets the first one's outcome instead of being
// applied again. An earlier attempt with the same ID may still be on its
// way to the log, so a write made with WithWriteID is never answered "not
// written" unless the replica knows no attempt can apply.
func WithWriteID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, writeIDKey{}, writeIDValue{id: id})
}

// WithNewWriteID is WithWriteID for an ID no earlier attempt used (one the
// server made up for this write, not a client's Idempotency-Key).
func WithNewWriteID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, writeIDKey{}, writeIDValue{id: id, fresh: true})
}

// WriteID returns the write ID ctx carries, or "", and whether it is new
// (WithNewWriteID): no earlier attempt can have used it.
func WriteID(ctx context.Context) (id string, fresh bool) {
	v, _ := ctx.Value(writeIDKey{}).(writeIDValue)
	return v.id, v.fresh
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
