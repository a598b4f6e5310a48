package extauthz_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// TestLifecycleLeavesNoGoroutines: the server serves a PDP its caller
// built; Shutdown stops the server's goroutines and leaves the PDP
// answering, and the caller's Close of the PDP stops the decision log's.
// Afterwards no goroutine of either is left.
func TestLifecycleLeavesNoGoroutines(t *testing.T) {
	ctx := context.Background()
	store := fixture.DemoStore(t)
	eng := fixture.StoreEngine(t, store)
	b := fixture.Bundle(t)
	before := runtime.NumGoroutine()

	p, err := pdp.New(ctx, pdp.Config{Engine: eng, Store: store, Policy: b, DecisionLog: &fixture.SyncBuffer{}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := extauthz.New(extauthz.Config{
		PDP: p, Store: store, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		AdminInsecure: true, AppAPIInsecure: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Envoy(ctx, pdp.IfaceGRPC, fixture.EnvoyRequest("GET", "/healthz", nil)); err != nil {
		t.Fatalf("the PDP after the server's shutdown: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the server and its PDP:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
