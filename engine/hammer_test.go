package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

// TestHammerHotSwap evaluates from many goroutines while bundles are swapped
// in: no evaluation fails, and every result comes from one of the bundles.
func TestHammerHotSwap(t *testing.T) {
	const pol = `package swap

default allow := false

allow if data.allowed[input.user]

rev := data.rev
`
	bundles := make([]*bundle.Bundle, 3)
	for i := range bundles {
		b, err := compiler.Compile(context.Background(), compiler.Options{
			Modules:     map[string]string{"swap.rego": pol},
			Data:        map[string]any{"rev": i, "allowed": map[string]any{"alice": true}},
			Entrypoints: []string{"swap/allow", "swap/rev"},
			Revision:    fmt.Sprintf("rev-%d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		bundles[i] = b
	}
	e := newEngine(t, engine.Config{MaxInstances: 4}, bundles[0])

	goroutines, swaps := 16, 30
	if testing.Short() {
		goroutines, swaps = 8, 10
	}
	var (
		wg     sync.WaitGroup
		evals  atomic.Int64
		stop   = make(chan struct{})
		failed atomic.Value
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, 0, 16)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user, want := "alice", "true"
				if (g+i)%2 == 1 {
					user, want = "bob", "false"
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var err error
				dst, err = e.Eval(ctx, "swap/allow", []byte(`{"user":"`+user+`"}`), dst[:0])
				if err == nil && string(dst) != want {
					err = fmt.Errorf("allow(%s) = %s, want %s", user, dst, want)
				}
				if err == nil {
					dst, err = e.Eval(ctx, "swap/rev", nil, dst[:0])
					if err == nil && (len(dst) != 1 || dst[0] < '0' || dst[0] > '2') {
						err = fmt.Errorf("rev = %s", dst)
					}
				}
				cancel()
				if err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				evals.Add(2)
			}
		}()
	}
	revs := map[string]bool{}
	for i := 1; i <= swaps && failed.Load() == nil; i++ {
		if err := e.Load(context.Background(), bundles[i%len(bundles)]); err != nil {
			t.Fatal(err)
		}
		revs[e.Revision()] = true
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("after %d evaluations: %v", evals.Load(), err)
	}
	if evals.Load() < int64(goroutines) {
		t.Fatalf("only %d evaluations during %d swaps", evals.Load(), swaps)
	}
	if len(revs) != len(bundles) {
		t.Fatalf("revisions seen %v, want %d", revs, len(bundles))
	}
	t.Logf("%d evaluations during %d swaps", evals.Load(), swaps)
}

// TestCloseWhileEvaluating closes the engine under load: evaluations either
// succeed or fail with ErrClosed.
func TestCloseWhileEvaluating(t *testing.T) {
	b := compileModules(t, map[string]string{"p.rego": "package p\nallow := true\n"}, nil, "p/allow")
	e, err := engine.New(context.Background(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := e.Eval(context.Background(), "p/allow", nil, nil)
				if err == engine.ErrClosed {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), b); err != engine.ErrClosed {
		t.Fatalf("load after close: %v", err)
	}
}
