package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/types"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
)

// blockingEngine loads a policy whose test.block builtin waits until
// the returned release function is called, holding its instance.
func blockingEngine(t *testing.T, maxInstances int) (e *engine.Engine, entered <-chan struct{}, release func(), load func(rev string)) {
	t.Helper()
	in, gate := make(chan struct{}, 16), make(chan struct{})
	r := engine.NewRegistry()
	if err := r.Register("test.block", 0, engine.Predicate3(func(ctx context.Context, a, _, _ string) (bool, error) {
		if a != "block" {
			return true, nil
		}
		in <- struct{}{}
		<-gate
		return true, nil
	})); err != nil {
		t.Fatal(err)
	}
	compile := func(rev string) *bundle.Bundle {
		b, err := compiler.Compile(context.Background(), compiler.Options{
			Modules:     map[string]string{"p.rego": "package p\nallow if test.block(input.a, \"\", \"\")\nrev := data.rev\n"},
			Data:        map[string]any{"rev": rev},
			Entrypoints: []string{"p/allow", "p/rev"},
			Builtins:    []bundle.HostBuiltin{{Name: "test.block", Decl: types.NewFunction(types.Args(types.S, types.S, types.S), types.B)}},
			Revision:    rev,
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	e = newEngine(t, engine.Config{MaxInstances: maxInstances, Builtins: r}, compile("one"))
	return e, in, func() { close(gate) }, func(rev string) {
		if err := e.Load(context.Background(), compile(rev)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPoolWaitsForInstance: with every instance busy an evaluation waits,
// gives up at its deadline, and runs as soon as an instance comes back;
// no instance beyond the bound is created.
func TestPoolWaitsForInstance(t *testing.T) {
	e, entered, release, _ := blockingEngine(t, 1)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := e.Eval(ctx, "p/allow", []byte(`{"a":"block"}`), nil)
		first <- err
	}()
	<-entered

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := e.Eval(short, "p/allow", []byte(`{"a":"go"}`), nil)
	var ee *engine.EvalError
	if !errors.As(err, &ee) || ee.Code != engine.CodeDeadline {
		t.Fatalf("eval with the only instance busy = %v, want %s", err, engine.CodeDeadline)
	}

	waiting := make(chan []byte, 1)
	go func() {
		out, err := e.Eval(ctx, "p/allow", []byte(`{"a":"go"}`), nil)
		if err != nil {
			out = []byte(err.Error())
		}
		waiting <- out
	}()
	select {
	case out := <-waiting:
		t.Fatalf("eval ran while the only instance was busy: %s", out)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("blocked eval: %v", err)
	}
	if out := <-waiting; string(out) != "true" {
		t.Fatalf("waiting eval = %s, want true", out)
	}
	if st := e.Stats(); st.InstancesCreated != 0 || st.InstancesDiscarded != 0 {
		t.Fatalf("instances created %d, discarded %d; want the template only", st.InstancesCreated, st.InstancesDiscarded)
	}
}

// TestPoolSwapWhileBusy: a bundle loaded while the old one's only instance
// is busy serves at once, and the busy evaluation finishes on the old one.
func TestPoolSwapWhileBusy(t *testing.T) {
	e, entered, release, load := blockingEngine(t, 1)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		out, err := e.Eval(ctx, "p/allow", []byte(`{"a":"block"}`), nil)
		if err == nil && string(out) != "true" {
			err = errors.New("blocked eval returned " + string(out))
		}
		first <- err
	}()
	<-entered
	load("two")
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := e.Eval(quick, "p/rev", nil, nil)
	if err != nil || string(out) != `"two"` {
		t.Fatalf("rev after the swap = %s, %v; want \"two\"", out, err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	out, err = e.Eval(ctx, "p/rev", nil, nil)
	if err != nil || string(out) != `"two"` {
		t.Fatalf("rev = %s, %v; want \"two\"", out, err)
	}
}
