package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestEvalCtx holds evalCtx to context.WithTimeout's behaviour: it ends at
// its deadline (as the watchdog finds it), when the evaluation returns, or
// with its parent, and its Done channel, made on demand, closes then.
func TestEvalCtx(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		end     func(c *evalCtx, cancelParent context.CancelFunc)
		doneNow bool // ask for Done before it ends
		want    error
	}{
		{"deadline", func(c *evalCtx, _ context.CancelFunc) { c.expire(now.Add(time.Second)) }, true, context.DeadlineExceeded},
		{"deadline, Done after", func(c *evalCtx, _ context.CancelFunc) { c.expire(now.Add(time.Second)) }, false, context.DeadlineExceeded},
		{"returned", func(c *evalCtx, _ context.CancelFunc) { c.end(stateCanceled) }, true, context.Canceled},
		{"parent canceled", func(_ *evalCtx, cancel context.CancelFunc) { cancel() }, true, context.Canceled},
		{"parent canceled, Done after", func(_ *evalCtx, cancel context.CancelFunc) { cancel() }, false, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := newEvalCtx(parent, now.Add(time.Millisecond))
			if d, ok := c.Deadline(); !ok || !d.Equal(now.Add(time.Millisecond)) {
				t.Fatalf("Deadline = %v, %v", d, ok)
			}
			c.expire(now) // not yet
			if err := c.Err(); err != nil {
				t.Fatalf("Err before the end = %v", err)
			}
			var done <-chan struct{}
			if tc.doneNow {
				done = c.Done()
				select {
				case <-done:
					t.Fatal("Done closed before the end")
				default:
				}
			}
			tc.end(c, cancel)
			if !tc.doneNow {
				done = c.Done()
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Done not closed")
			}
			if err := c.Err(); !errors.Is(err, tc.want) {
				t.Fatalf("Err = %v, want %v", err, tc.want)
			}
			c.end(stateCanceled) // ending again changes nothing
			if err := c.Err(); !errors.Is(err, tc.want) {
				t.Fatalf("Err after a second end = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestEvalCtxEarlierParentDeadline: the parent's earlier deadline is the
// context's.
func TestEvalCtxEarlierParentDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pd, _ := parent.Deadline()
	c := newEvalCtx(parent, time.Now().Add(time.Hour))
	if d, _ := c.Deadline(); !d.Equal(pd) {
		t.Fatalf("Deadline = %v, want the parent's %v", d, pd)
	}
}
