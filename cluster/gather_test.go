package cluster

import (
	"context"
	"testing"
	"time"
)

// TestGather: a gathering window ends when its time is up or as soon as
// somebody begins waiting for the apply loop, and none starts while
// somebody waits.
func TestGather(t *testing.T) {
	var g gather
	ctx := context.Background()

	gctx, stop := g.start(ctx, time.Now().Add(time.Hour))
	if gctx == nil {
		t.Fatal("no window although nobody waits")
	}
	if gctx.Err() != nil {
		t.Fatal("the window ended before its time")
	}
	g.begin()
	select {
	case <-gctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a goroutine began waiting and the window stayed open")
	}
	stop()

	if gctx, stop := g.start(ctx, time.Now().Add(time.Hour)); gctx != nil || stop != nil {
		t.Fatal("a window started while a goroutine waits")
	}
	g.end()

	gctx, stop = g.start(ctx, time.Now().Add(10*time.Millisecond))
	if gctx == nil {
		t.Fatal("no window once nobody waits any more")
	}
	select {
	case <-gctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the window outlived its time")
	}
	stop()
	g.begin() // after stop: nothing to cancel, no panic
	g.end()
}
