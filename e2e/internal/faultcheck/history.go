package faultcheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Op is one write of one tuple as its client saw it.
type Op struct {
	Tuple   string
	Grant   bool // a touch; false is a delete
	Replica string
	Start   time.Time
	End     time.Time
	Answer  Answer // the last answer (after retries with the same key)
	Retries int    // retries with the same Idempotency-Key after unknown answers
	First   Answer // the first answer, when there were retries
	// Conditional: the write carried a precondition the acknowledged
	// history makes true (a grant that the tuple is absent, a revoke
	// that it is present).
	Conditional bool
}

// CheckRec is one check that carried a consistency token.
type CheckRec struct {
	Tuple   string
	Replica string
	Token   uint64
	Want    bool
	Answer  CheckAnswer
	Time    time.Time
}

// Event is a nemesis action.
type Event struct {
	Time  time.Time
	What  string
	Fault bool // an injection (kill, stall, restart); false is a heal
}

// History records what clients and the nemesis did. The workload it
// expects makes each tuple's ops sequential: one client owns a tuple,
// alternates grant and revoke on it starting from absent, sends its next
// op only after the previous one was acknowledged, and stops using it
// after any answer other than written. Then every tuple's final state is
// decidable: the last acknowledged op's, or after a "not written" answer
// still that one's (the refused op would have flipped it); after an
// unknown answer either is allowed.
type History struct {
	mu      sync.Mutex
	ops     []Op
	checks  []CheckRec
	events  []Event
	unknown int // unknown answers, those later resolved by a retry included
	notSent int
}

// AddOp records an op; a client adds its ops on a tuple in order.
func (h *History) AddOp(op Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// AddUnknown counts an unknown answer (also one a retry resolved).
func (h *History) AddUnknown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unknown++
}

// AddNotSent counts a request that never left (connection refused).
func (h *History) AddNotSent() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notSent++
}

// AddCheck records a check with a token.
func (h *History) AddCheck(c CheckRec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks = append(h.checks, c)
}

// AddEvent records a nemesis action.
func (h *History) AddEvent(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Result is what Verify found.
type Result struct {
	Writes          int // ops sent (a retry with the same key is the same op)
	Acked           int // answered written
	NotWritten      int // answered not written
	Unknown         int // unknown answers, resolved or not
	UnknownFinal    int // ops whose outcome stayed unknown
	UnknownApplied  int // of those, how many the final state shows applied
	NotSent         int // requests refused at connect (sent again elsewhere)
	Retried         int // ops retried with their Idempotency-Key
	Checks          int // checks with a token
	ChecksRight     int
	ChecksFailClose int // refused (revision not reached, unavailable)
	ChecksOther     int // transport errors and other statuses
	Faults          int
	Unavail         []time.Duration // per fault: until the first write sent after it was acknowledged
	Censored        int             // faults after which no write was acknowledged before the run ended

	Lost              []string // an acknowledged op's effect missing on a replica
	NotWrittenApplied []string // an op answered not written whose effect a replica shows
	WrongChecks       []string // a check with a token that answered older data
	WrongPrecondition []string // a conditional write refused although its precondition held
	Conditional       int      // conditional ops sent
	Diverged          []string // replicas whose listing differs from the first's
}

// Violations counts everything that must be zero.
func (r *Result) Violations() int {
	return len(r.Lost) + len(r.NotWrittenApplied) + len(r.WrongChecks) + len(r.WrongPrecondition) + len(r.Diverged)
}

// Verify checks the history against the final listings of every replica
// (replica name to sorted tuples). end is when the workload stopped.
func (h *History) Verify(listings map[string][]string, end time.Time) *Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := &Result{Unknown: h.unknown, NotSent: h.notSent}
	names := make([]string, 0, len(listings))
	for n := range listings {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names[1:] {
		if !slices.Equal(listings[n], listings[names[0]]) {
			r.Diverged = append(r.Diverged, fmt.Sprintf("%s (%d tuples) differs from %s (%d tuples): %s", n, len(listings[n]), names[0], len(listings[names[0]]), diff(listings[names[0]], listings[n])))
		}
	}
	// Per tuple, in the order its client sent them.
	type state struct {
		present bool   // the state the acknowledged ops leave
		frozen  *Op    // the op after which the client stopped
		last    string // the last acknowledged op, for messages
	}
	tuples := map[string]*state{}
	var order []string
	for i := range h.ops {
		op := &h.ops[i]
		st := tuples[op.Tuple]
		if st == nil {
			st = &state{}
			tuples[op.Tuple] = st
			order = append(order, op.Tuple)
		}
		r.Writes++
		if op.Conditional {
			r.Conditional++
		}
		if op.Retries > 0 {
			r.Retried++
		}
		if st.frozen != nil {
			// The workload never sends after a non-acknowledged op.
			r.Lost = append(r.Lost, fmt.Sprintf("%s: op after a non-acknowledged one (workload bug)", op.Tuple))
			continue
		}
		switch op.Answer.Outcome {
		case Written:
			r.Acked++
			st.present = op.Grant
			st.last = fmt.Sprintf("%s acknowledged at revision %d on %s", verb(op.Grant), op.Answer.Revision, op.Replica)
		case NotWritten:
			r.NotWritten++
			st.frozen = op
			if op.Conditional && strings.Contains(op.Answer.Body, `"precondition_failed"`) {
				r.WrongPrecondition = append(r.WrongPrecondition, fmt.Sprintf("%s: %s on %s refused its precondition (%s), yet %s",
					op.Tuple, verb(op.Grant), op.Replica, strings.TrimSpace(op.Answer.Body), orNone(st.last)))
			}
		default:
			r.UnknownFinal++
			st.frozen = op
		}
	}
	for _, tu := range order {
		st := tuples[tu]
		var wrong []string // replicas whose state differs from the history's
		have := false
		for _, n := range names {
			_, has := slices.BinarySearch(listings[n], tu)
			if st.frozen != nil && st.frozen.Answer.Outcome != NotWritten {
				if n == names[0] && has == st.frozen.Grant && has != st.present {
					r.UnknownApplied++
				}
				continue
			}
			if has != st.present {
				wrong, have = append(wrong, n), has
			}
		}
		if len(wrong) == 0 {
			continue
		}
		on := strings.Join(wrong, ", ")
		if f := st.frozen; f != nil {
			retry := ""
			if f.Retries > 0 {
				retry = fmt.Sprintf(" after %d retries with its Idempotency-Key (first answer %v: %d %s)", f.Retries, f.First.Outcome, f.First.Status, strings.TrimSpace(f.First.Body))
			}
			r.NotWrittenApplied = append(r.NotWrittenApplied, fmt.Sprintf("%s on %s: %s sent to %s at %s answered not written (%d %s) at %s%s, but applied; before it: %s",
				tu, on, verb(f.Grant), f.Replica, f.Start.Format("15:04:05.000"), f.Answer.Status, strings.TrimSpace(f.Answer.Body), f.End.Format("15:04:05.000"), retry, orNone(st.last)))
			continue
		}
		r.Lost = append(r.Lost, fmt.Sprintf("%s on %s: present=%v, want %v (%s)", tu, on, have, st.present, orNone(st.last)))
	}
	for _, c := range h.checks {
		r.Checks++
		switch {
		case c.Answer.Err != nil:
			r.ChecksOther++
		case c.Answer.Status == 200 && c.Answer.Decision != nil:
			if *c.Answer.Decision == c.Want {
				r.ChecksRight++
			} else {
				r.WrongChecks = append(r.WrongChecks, fmt.Sprintf("%s on %s with token %d at %s: decision %v, want %v",
					c.Tuple, c.Replica, c.Token, c.Time.Format("15:04:05.000"), *c.Answer.Decision, c.Want))
			}
		case c.Answer.Status == 503:
			r.ChecksFailClose++
		default:
			r.ChecksOther++
		}
	}
	for _, e := range h.events {
		if !e.Fault {
			continue
		}
		r.Faults++
		first := time.Time{}
		for _, op := range h.ops {
			if op.Answer.Outcome == Written && !op.Start.Before(e.Time) && (first.IsZero() || op.End.Before(first)) {
				first = op.End
			}
		}
		if first.IsZero() {
			r.Censored++
			first = end
		}
		r.Unavail = append(r.Unavail, first.Sub(e.Time))
	}
	return r
}

func verb(grant bool) string {
	if grant {
		return "grant"
	}
	return "revoke"
}

func orNone(s string) string {
	if s == "" {
		return "no acknowledged op before it"
	}
	return s
}

// diff names up to five tuples in one listing and not the other.
func diff(a, b []string) string {
	var out []string
	for _, s := range a {
		if _, ok := slices.BinarySearch(b, s); !ok {
			out = append(out, "-"+s)
		}
	}
	for _, s := range b {
		if _, ok := slices.BinarySearch(a, s); !ok {
			out = append(out, "+"+s)
		}
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, ", ")
}

// Percentile is the p-th percentile (0-100) of ds, nearest rank; 0 if
// empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
