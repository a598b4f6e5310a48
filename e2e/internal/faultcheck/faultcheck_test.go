package faultcheck

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		err    error
		want   Outcome
		rev    uint64
		id     string
	}{
		{name: "old-200", status: 200, body: `{"revision":42}`, want: Written, rev: 42},
		{name: "new-200", status: 200, body: `{"outcome":"written","revision":7,"write_id":"w1"}`, want: Written, rev: 7, id: "w1"},
		{name: "new-503-not-written", status: 503, body: `{"outcome":"not_written","error":"x"}`, want: NotWritten},
		{name: "new-504-unknown", status: 504, body: `{"outcome":"unknown","write_id":"w2"}`, want: Unknown, id: "w2"},
		{name: "old-503-nothing", status: 503, body: `{"error":"unavailable: nothing was written; retry later","reason":"unavailable"}`, want: NotWritten},
		{name: "old-503-other", status: 503, body: `{"error":"unavailable: in the log but not yet applied","reason":"unavailable"}`, want: Unknown},
		{name: "new-503-unknown-wins", status: 503, body: `{"outcome":"unknown","error":"nothing was written"}`, want: Unknown},
		{name: "400", status: 400, body: `{"error":"bad tuple"}`, want: NotWritten},
		{name: "500", status: 500, body: `{}`, want: Unknown},
		{name: "refused", err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, want: NotSent},
		{name: "reset", err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}, want: Unknown},
		{name: "timeout", err: errors.New("context deadline exceeded"), want: Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Classify(tc.status, []byte(tc.body), tc.err)
			if a.Outcome != tc.want || a.Revision != tc.rev || a.WriteID != tc.id {
				t.Fatalf("got %v rev %d id %q, want %v rev %d id %q", a.Outcome, a.Revision, a.WriteID, tc.want, tc.rev, tc.id)
			}
		})
	}
}

// TestVerify feeds Verify histories with each kind of violation, and one
// without.
func TestVerify(t *testing.T) {
	t0 := time.Now()
	w := func(rev uint64) Answer { return Answer{Outcome: Written, Status: 200, Revision: rev} }
	yes, no := true, false
	for _, tc := range []struct {
		name     string
		ops      []Op
		checks   []CheckRec
		listings map[string][]string
		lost     int
		nwa      int
		wrong    int
		diverged int
		applied  int
		precond  int
	}{
		{
			name: "clean",
			ops: []Op{
				{Tuple: "a", Grant: true, Answer: w(1)}, {Tuple: "a", Grant: false, Answer: w(2)},
				{Tuple: "b", Grant: true, Answer: w(3)},
				{Tuple: "c", Grant: true, Answer: Answer{Outcome: Unknown}},
				{Tuple: "d", Grant: true, Answer: w(4)}, {Tuple: "d", Grant: false, Answer: Answer{Outcome: NotWritten, Status: 503}},
			},
			checks:   []CheckRec{{Tuple: "a", Want: true, Answer: CheckAnswer{Status: 200, Decision: &yes}}, {Tuple: "a", Want: false, Answer: CheckAnswer{Status: 503}}},
			listings: map[string][]string{"A": {"b", "c", "d"}, "B": {"b", "c", "d"}},
			applied:  1,
		},
		{
			name:     "lost-grant-and-lost-revoke",
			ops:      []Op{{Tuple: "a", Grant: true, Answer: w(1)}, {Tuple: "b", Grant: true, Answer: w(2)}, {Tuple: "b", Grant: false, Answer: w(3)}},
			listings: map[string][]string{"A": {"b"}},
			lost:     2,
		},
		{
			name:     "not-written-applied",
			ops:      []Op{{Tuple: "a", Grant: true, Answer: Answer{Outcome: NotWritten, Status: 503}}},
			listings: map[string][]string{"A": {"a"}, "B": {"a"}},
			nwa:      1,
		},
		{
			name:     "stale-check",
			ops:      []Op{{Tuple: "a", Grant: true, Answer: w(1)}},
			checks:   []CheckRec{{Tuple: "a", Want: true, Answer: CheckAnswer{Status: 200, Decision: &no}}},
			listings: map[string][]string{"A": {"a"}},
			wrong:    1,
		},
		{
			name:     "precondition-refused",
			ops:      []Op{{Tuple: "a", Grant: true, Answer: w(1)}, {Tuple: "a", Grant: false, Conditional: true, Answer: Answer{Outcome: NotWritten, Status: 409, Body: `{"outcome":"not_written","reason":"precondition_failed"}`}}},
			listings: map[string][]string{"A": {"a"}},
			precond:  1,
		},
		{
			name:     "diverged",
			listings: map[string][]string{"A": {"x"}, "B": {"x", "y"}},
			diverged: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h History
			for _, op := range tc.ops {
				h.AddOp(op)
			}
			for _, c := range tc.checks {
				h.AddCheck(c)
			}
			r := h.Verify(tc.listings, t0)
			if len(r.Lost) != tc.lost || len(r.NotWrittenApplied) != tc.nwa || len(r.WrongChecks) != tc.wrong || len(r.Diverged) != tc.diverged || r.UnknownApplied != tc.applied || len(r.WrongPrecondition) != tc.precond {
				t.Fatalf("lost %v, not-written applied %v, wrong %v, diverged %v, unknown applied %d", r.Lost, r.NotWrittenApplied, r.WrongChecks, r.Diverged, r.UnknownApplied)
			}
		})
	}
}

func TestUnavailability(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h History
	h.AddEvent(Event{Time: t0, What: "kill", Fault: true})
	h.AddOp(Op{Tuple: "a", Grant: true, Start: t0.Add(-time.Second), End: t0.Add(time.Second), Answer: Answer{Outcome: Written}})
	h.AddOp(Op{Tuple: "a", Grant: false, Start: t0.Add(time.Second), End: t0.Add(3 * time.Second), Answer: Answer{Outcome: Written}})
	h.AddEvent(Event{Time: t0.Add(5 * time.Second), What: "stall", Fault: true})
	r := h.Verify(map[string][]string{"A": nil}, t0.Add(9*time.Second))
	if len(r.Unavail) != 2 || r.Unavail[0] != 3*time.Second || r.Unavail[1] != 4*time.Second || r.Censored != 1 {
		t.Fatalf("unavailability %v, censored %d", r.Unavail, r.Censored)
	}
	if p := Percentile(r.Unavail, 50); p != 3*time.Second {
		t.Fatalf("P50 %v", p)
	}
}
