package pdp

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// spinPolicy's decision runs until its deadline.
const spinPolicy = `package t
import rego.v1
spin if {
	some i in numbers.range(1, 20000)
	some j in numbers.range(1, 20000)
	i == j - 30000
}
result := {"allowed": spin}
decision := {"allow": spin}
`

// TestBudget: evaluations under a request's budget that run past it fail
// with ErrBudgetExceeded (code budget_exceeded), whichever evaluation the
// budget ends in; without a budget, an evaluation past its own timeout is
// a deadline, as before.
func TestBudget(t *testing.T) {
	ctx := context.Background()
	store := fixture.DemoStore(t)
	p, err := New(ctx, Config{
		Engine: fixture.StoreEngine(t, store), Store: store, Policy: compileT(t, spinPolicy),
		EnvoyEntrypoint: "t/result", AuthzEntrypoint: "t/decision", EvalTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	c := &Check{Subject: Subject{Type: "user", ID: "bob"}, Action: "read", Resource: Resource{Type: "file", ID: "report.pdf"}}

	if _, err := p.Check(ctx, IfaceAuthZEN, c); Code(err) != CodeDeadline {
		t.Fatalf("without a budget: %v (%s), want %s", err, Code(err), CodeDeadline)
	}
	bctx, cancel := p.Budget(ctx)
	defer cancel()
	var last error
	for range 5 { // 5 × 50 ms: past the budget of 100 ms
		if _, last = p.Check(bctx, IfaceAuthZEN, c); errors.Is(last, ErrBudgetExceeded) {
			break
		}
	}
	if !errors.Is(last, ErrBudgetExceeded) || Code(last) != CodeBudget {
		t.Fatalf("under a budget: %v (%s), want ErrBudgetExceeded", last, Code(last))
	}
}
