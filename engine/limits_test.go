package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/engine"
)

const runaway = `package limits

spin if {
	some i in numbers.range(1, 20000)
	some j in numbers.range(1, 20000)
	i == j - 30000
}

hog := count(numbers.range(1, 10000000))

ok := true
`

// TestDeadlineStopsRunaway holds the engine to what RATIONALE.md promises:
// a runaway policy stops within about a millisecond of its deadline (the
// watchdog ticks every millisecond), its instance is discarded and the
// engine still answers. The median overrun of several runs must stay under
// 100 ms: slack for a loaded machine shared with other work, yet far from
// the seconds a missing watchdog would take.
func TestDeadlineStopsRunaway(t *testing.T) {
	const (
		runs     = 5
		timeout  = 20 * time.Millisecond
		promised = 100 * time.Millisecond
	)
	b := compileModules(t, map[string]string{"limits.rego": runaway}, nil, "limits/spin", "limits/ok")
	e := newEngine(t, engine.Config{MaxInstances: 1}, b)
	overruns := make([]time.Duration, 0, runs)
	for range runs {
		overruns = append(overruns, overrun(t, e, "limits/spin", nil, timeout))
		// The instance was discarded; the engine still answers.
		out, err := e.Eval(context.Background(), "limits/ok", nil, nil)
		if err != nil || string(out) != "true" {
			t.Fatalf("after deadline: %s, %v", out, err)
		}
	}
	slices.Sort(overruns)
	median := overruns[runs/2]
	t.Logf("stopped after the deadline by %v (median %v)", overruns, median)
	if median > promised {
		t.Fatalf("runaway evaluations stopped a median %v after their deadline, want about 1 ms (at most %v): %v", median, promised, overruns)
	}
	if st := e.Stats(); st.InstancesDiscarded != runs {
		t.Fatalf("instances discarded = %d, want %d (one per stopped evaluation)", st.InstancesDiscarded, runs)
	}
}

// overrun evaluates entrypoint with a deadline timeout away, requires it
// to stop at the deadline, and returns how long after the deadline it did.
func overrun(t *testing.T, e *engine.Engine, entrypoint string, input []byte, timeout time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := e.Eval(ctx, entrypoint, input, nil)
	deadline, _ := ctx.Deadline()
	late := time.Since(deadline)
	var ee *engine.EvalError
	if !errors.As(err, &ee) || ee.Code != engine.CodeDeadline {
		t.Fatalf("err = %v, want EvalError %s", err, engine.CodeDeadline)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v does not match context.DeadlineExceeded", err)
	}
	return late
}

// quadratic is an engine whose policy q/found looks for a needle of
// needle bytes that never matches in a megabyte (contains: a compare of the
// needle at every position), and that input.
func quadratic(t *testing.T, needle int) (*engine.Engine, []byte) {
	t.Helper()
	b := compileModules(t, map[string]string{"q.rego": "package q\n\nfound if contains(input.hay, input.needle)\n"}, nil, "q/found")
	input, err := json.Marshal(map[string]string{
		"hay":    strings.Repeat("a", 1<<20),
		"needle": strings.Repeat("a", needle) + "b",
	})
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, engine.Config{MaxInstances: 1}, b), input
}

// TestDeadlineStopsQuadraticBuiltin: the interrupt check is left out of
// the runtime's innermost loops without calls (a string compare, a hash),
// so a builtin that runs such a loop once per position of a client's
// string, contains with a needle of 128 KiB over a megabyte that never
// matches (some 10^11 byte compares: minutes), still stops at its
// deadline, as the loop over the positions is checked.
func TestDeadlineStopsQuadraticBuiltin(t *testing.T) {
	const (
		timeout  = 20 * time.Millisecond
		promised = 100 * time.Millisecond
	)
	e, input := quadratic(t, 1<<17)
	overruns := make([]time.Duration, 0, 3)
	for range 3 {
		overruns = append(overruns, overrun(t, e, "q/found", input, timeout))
	}
	slices.Sort(overruns)
	if median := overruns[1]; median > promised {
		t.Fatalf("the quadratic builtin stopped a median %v after its deadline, want at most %v: %v", median, promised, overruns)
	}
}

// TestLongEvaluationLetsGCRun: compiled Wasm has no point where the Go
// runtime can preempt it, so an evaluation that runs for seconds would
// hold a garbage collection's stop-the-world, and every other goroutine of
// the process (the watchdog, other requests) for as long, deadline or
// not. The loops yield to the runtime instead: a collection started while
// such an evaluation runs (contains with a needle of 16 KiB over a
// megabyte: tens of seconds) finishes at once, and cancelling the
// evaluation then stops it.
func TestLongEvaluationLetsGCRun(t *testing.T) {
	e, input := quadratic(t, 1<<14)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := e.Eval(ctx, "q/found", input, nil)
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the evaluation is in its loops
	start := time.Now()
	runtime.GC()
	took := time.Since(start)
	cancel()
	err := <-done
	var ee *engine.EvalError
	if !errors.As(err, &ee) || ee.Code != engine.CodeCanceled {
		t.Fatalf("err = %v, want EvalError %s (the evaluation was still running)", err, engine.CodeCanceled)
	}
	if took > time.Second {
		t.Fatalf("a garbage collection took %v while an evaluation ran, want well under a second", took)
	}
}

func TestCanceledBeforeEval(t *testing.T) {
	b := compileModules(t, map[string]string{"limits.rego": runaway}, nil, "limits/ok")
	e := newEngine(t, engine.Config{}, b)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Eval(ctx, "limits/ok", nil, nil)
	var ee *engine.EvalError
	if !errors.As(err, &ee) || ee.Code != engine.CodeCanceled {
		t.Fatalf("err = %v, want %s", err, engine.CodeCanceled)
	}
}

func TestMemoryLimit(t *testing.T) {
	b := compileModules(t, map[string]string{"limits.rego": runaway}, nil, "limits/hog", "limits/ok")
	e := newEngine(t, engine.Config{MaxInstances: 1, MemoryLimitPages: 64}, b)
	_, err := e.Eval(context.Background(), "limits/hog", nil, nil)
	var ee *engine.EvalError
	if !errors.As(err, &ee) || ee.Code != engine.CodeMemory {
		t.Fatalf("err = %v, want EvalError %s", err, engine.CodeMemory)
	}
	out, err := e.Eval(context.Background(), "limits/ok", nil, nil)
	if err != nil || string(out) != "true" {
		t.Fatalf("after memory limit: %s, %v", out, err)
	}
}

func TestOversizedInstanceDiscarded(t *testing.T) {
	const pol = `package grow

big := count([x | some x in numbers.range(1, 200000)])

small := 1
`
	b := compileModules(t, map[string]string{"grow.rego": pol}, nil, "grow/big", "grow/small")
	e := newEngine(t, engine.Config{MaxInstances: 1, MaxInstanceBytes: 4 << 20}, b)
	ctx := context.Background()
	if out, err := e.Eval(ctx, "grow/small", nil, nil); err != nil || string(out) != "1" {
		t.Fatalf("small = %s, %v", out, err)
	}
	if st := e.Stats(); st.InstancesOversized != 0 {
		t.Fatalf("small evaluation discarded its instance: %+v", st)
	}
	out, err := e.Eval(ctx, "grow/big", nil, nil)
	if err != nil || string(out) != "200000" {
		t.Fatalf("big = %s, %v", out, err)
	}
	st := e.Stats()
	if st.InstancesOversized != 1 || st.InstancesDiscarded != 1 {
		t.Fatalf("after a big evaluation: %+v, want one oversized instance discarded", st)
	}
	if out, err := e.Eval(ctx, "grow/small", nil, nil); err != nil || string(out) != "1" {
		t.Fatalf("small after discard = %s, %v", out, err)
	}
	if st := e.Stats(); st.InstancesCreated != 1 {
		t.Fatalf("instances created = %d, want 1 (from the snapshot)", st.InstancesCreated)
	}
}

func TestInvalidResultJSON(t *testing.T) {
	// OPA's Wasm runtime turns to_number(".") into a number it prints as
	// ".": the engine must not pass that on as JSON. nexus' compiler has
	// the host run to_number, as OPA's evaluator does; a bundle built by
	// opa build keeps the runtime's.
	b := opaWasmBundle(t, map[string]string{"n.rego": "package n\n\nx := to_number(input.s)\n"}, "n/x")
	e := newEngine(t, engine.Config{}, b)
	out, err := e.Eval(context.Background(), "n/x", []byte(`{"s":"."}`), nil)
	if err == nil {
		if !json.Valid(out) {
			t.Fatalf("invalid JSON result %q passed on", out)
		}
	} else {
		var ee *engine.EvalError
		if !errors.As(err, &ee) || ee.Code != engine.CodeInvalidResult {
			t.Fatalf("err = %v, want %s", err, engine.CodeInvalidResult)
		}
	}
	if out, err := e.Eval(context.Background(), "n/x", []byte(`{"s":"1.5"}`), nil); err != nil || string(out) != "1.5" {
		t.Fatalf("to_number(1.5) = %s, %v", out, err)
	}
}

// TestTimeoutStopsRunaway is TestDeadlineStopsRunaway for a bound given
// as EvalTrustedUntil's deadline, which the watchdog enforces without a
// timer: the runaway stops as promptly, with the same error, and a wait
// for the one busy instance ends at the bound too.
func TestTimeoutStopsRunaway(t *testing.T) {
	const (
		runs     = 5
		timeout  = 20 * time.Millisecond
		promised = 100 * time.Millisecond
	)
	b := compileModules(t, map[string]string{"limits.rego": runaway}, nil, "limits/spin", "limits/ok")
	e := newEngine(t, engine.Config{MaxInstances: 1}, b)
	overruns := make([]time.Duration, 0, runs)
	for range runs {
		start := time.Now()
		_, err := e.EvalTrustedUntil(context.Background(), start.Add(timeout), "limits/spin", nil, nil)
		overruns = append(overruns, time.Since(start)-timeout)
		var ee *engine.EvalError
		if !errors.As(err, &ee) || ee.Code != engine.CodeDeadline || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want EvalError %s matching context.DeadlineExceeded", err, engine.CodeDeadline)
		}
		out, err := e.EvalTrustedUntil(context.Background(), time.Now().Add(timeout), "limits/ok", nil, nil)
		if err != nil || string(out) != "true" {
			t.Fatalf("after deadline: %s, %v", out, err)
		}
	}
	slices.Sort(overruns)
	if median := overruns[runs/2]; median > promised {
		t.Fatalf("runaway evaluations stopped a median %v after their deadline, want at most %v: %v", median, promised, overruns)
	}
	var in engine.Input
	in.Writer().Null()
	// EvalInputUntil is bounded the same way, and neither is bounded
	// when the deadline is zero.
	start := time.Now()
	_, err := e.EvalInputUntil(context.Background(), start.Add(timeout), "limits/spin", &in, nil)
	if ee := (*engine.EvalError)(nil); !errors.As(err, &ee) || ee.Code != engine.CodeDeadline {
		t.Fatalf("EvalInputUntil: err = %v, want EvalError %s", err, engine.CodeDeadline)
	}
	if took := time.Since(start); took > timeout+promised {
		t.Fatalf("EvalInputUntil: the runaway ran %v, bound %v", took, timeout)
	}
	if out, err := e.EvalTrustedUntil(context.Background(), time.Time{}, "limits/ok", nil, nil); err != nil || string(out) != "true" {
		t.Fatalf("EvalTrustedUntil without a deadline: %s, %v", out, err)
	}

	// The caller's own context still bounds it, and whichever ends first
	// wins.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := e.EvalTrustedUntil(ctx, time.Now().Add(time.Hour), "limits/spin", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller's deadline: err = %v", err)
	}

	// A wait for a free instance ends at the bound.
	done := make(chan error, 1)
	go func() {
		_, err := e.EvalTrustedUntil(context.Background(), time.Now().Add(300*time.Millisecond), "limits/spin", nil, nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // the spin holds the one instance
	start = time.Now()
	_, err = e.EvalTrustedUntil(context.Background(), time.Now().Add(timeout), "limits/ok", nil, nil)
	var ee *engine.EvalError
	if !errors.As(err, &ee) || ee.Code != engine.CodeDeadline {
		t.Fatalf("waiting for an instance: err = %v, want %s", err, engine.CodeDeadline)
	}
	if waited := time.Since(start); waited > 200*time.Millisecond {
		t.Fatalf("waited %v for an instance, bound %v", waited, timeout)
	}
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("spin: err = %v", err)
	}
}

// TestInvalidResultNumberInKey: a number that is not JSON (OPA's Wasm
// runtime's to_number("."), in a bundle opa build made) is refused in a
// result, nested or not, but a non-string key is written as a string of
// its text, which is valid JSON and passed on.
func TestInvalidResultNumberInKey(t *testing.T) {
	b := opaWasmBundle(t, map[string]string{"n.rego": "package n\n\nnested := [1, {\"a\": to_number(input.s)}]\n\nkey := {to_number(input.s): 1}\n\nset_key := {{to_number(input.s)}: true}\n"}, "n/nested", "n/key", "n/set_key")
	e := newEngine(t, engine.Config{}, b)
	ctx := context.Background()
	for _, tc := range []struct{ name, ep, input, want string }{
		{"nested", "n/nested", `{"s":"."}`, ""},
		{"nested valid", "n/nested", `{"s":"-1.5e3"}`, `[1,{"a":-1.5e3}]`},
		{"key", "n/key", `{"s":"."}`, `{".":1}`},
		{"set key", "n/set_key", `{"s":"."}`, `{"[.]":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := e.Eval(ctx, tc.ep, []byte(tc.input), nil)
			if tc.want == "" {
				var ee *engine.EvalError
				if err == nil || !errors.As(err, &ee) || ee.Code != engine.CodeInvalidResult {
					t.Fatalf("= %s, %v; want %s", out, err, engine.CodeInvalidResult)
				}
				return
			}
			if err != nil || string(out) != tc.want || !json.Valid(out) {
				t.Fatalf("= %s, %v; want %s", out, err, tc.want)
			}
		})
	}
}

// TestDeadlineEndsBuiltin: the context an OPA builtin sees ends at the
// evaluation's deadline and with the caller's context, so a builtin
// waiting on the network (http.send to a server that never answers) is
// stopped, and the evaluation fails with the deadline's code or the
// caller's error, never an answer.
func TestDeadlineEndsBuiltin(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	policy := `package slow

answer := http.send({"method": "GET", "url": input.url, "raise_error": false}).status_code
`
	b := compileModules(t, map[string]string{"slow.rego": policy}, nil, "slow/answer")
	e := newEngine(t, engine.Config{MaxInstances: 1}, b)
	in, _ := json.Marshal(map[string]string{"url": srv.URL})
	const bound = 100 * time.Millisecond

	start := time.Now()
	out, err := e.EvalTrustedUntil(context.Background(), start.Add(bound), "slow/answer", in, nil)
	if ee := (*engine.EvalError)(nil); !errors.As(err, &ee) || ee.Code != engine.CodeDeadline {
		t.Fatalf("at the deadline: %s, %v; want EvalError %s", out, err, engine.CodeDeadline)
	}
	if took := time.Since(start); took > bound+2*time.Second {
		t.Fatalf("the builtin ran %v past a %v deadline", took, bound)
	}

	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start = time.Now()
	out, err = e.EvalTrustedUntil(ctx, time.Time{}, "slow/answer", in, nil)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with the caller's context ended: %s, %v", out, err)
	}
	if took := time.Since(start); took > bound+2*time.Second {
		t.Fatalf("the builtin ran %v past the caller's %v", took, bound)
	}
}
