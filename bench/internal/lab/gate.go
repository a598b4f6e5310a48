package lab

import (
	"context"
	"fmt"
	"sync"
)

// GateResult is the outcome of a gate run.
type GateResult struct {
	Checks int `json:"checks"`
	Right  int `json:"right"`
	// Retried counts checks sent a second time because the first got no
	// answer (a transport error or an unexpected status): a wrong answer
	// is never retried.
	Retried int `json:"retried,omitempty"`
	// Wrong lists the checks whose decision was not the expected one, or
	// that failed (Error set).
	Wrong []WrongCheck `json:"wrong,omitempty"`
}

// WrongCheck is a check the server got wrong.
type WrongCheck struct {
	Line  int    `json:"line"`
	Check Check  `json:"check"`
	Got   bool   `json:"got"`
	Error string `json:"error,omitempty"`
}

// Summary is "right/checks right", with how many were sent again.
func (g GateResult) Summary() string {
	s := fmt.Sprintf("%d/%d right", g.Right, g.Checks)
	if g.Retried > 0 {
		s += fmt.Sprintf(" (%d sent again after no answer)", g.Retried)
	}
	return s
}

// Passed reports whether every decision was right.
func (g GateResult) Passed() bool { return g.Checks > 0 && g.Right == g.Checks }

// Gate sends every check (8 at a time) and compares each decision with
// the expected one. A check that got no answer is sent once more, alone,
// after the others (a loaded machine may time one out); a wrong answer
// stands. It returns ErrGateFailed, with the result, unless every
// decision is right.
func Gate(ctx context.Context, t *Target, checks []Check) (GateResult, error) {
	reqs, err := t.Prepare(checks)
	if err != nil {
		return GateResult{}, err
	}
	res := GateResult{Checks: len(checks)}
	outs := make([]Outcome, len(reqs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				outs[i] = t.Send(ctx, &reqs[i])
			}
		})
	}
	for i := range reqs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	for i := range outs {
		if outs[i].Err != nil {
			res.Retried++
			outs[i] = t.Send(ctx, &reqs[i])
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	for i, o := range outs {
		switch {
		case o.Err != nil:
			res.Wrong = append(res.Wrong, WrongCheck{Line: i + 1, Check: checks[i], Error: o.Err.Error()})
		case o.Allowed != checks[i].Allow:
			res.Wrong = append(res.Wrong, WrongCheck{Line: i + 1, Check: checks[i], Got: o.Allowed})
		default:
			res.Right++
		}
	}
	if !res.Passed() {
		return res, fmt.Errorf("%w: %d of %d checks wrong over %s", ErrGateFailed, len(res.Wrong), res.Checks, t.Interface())
	}
	return res, nil
}
