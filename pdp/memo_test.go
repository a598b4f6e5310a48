package pdp

import (
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/pdp/internal/result"
)

// TestResultMemo: with more distinct results than the memo has slots, so
// that slots are shared and replaced, every lookup answers the result of
// its own bytes, from concurrent goroutines, and a result asked for again
// at once is answered from the memo.
func TestResultMemo(t *testing.T) {
	p := &PDP{results: newResultMemo()}
	p.bufs.New = func() any { b := make([]byte, 0, 1024); return &b }
	doc := func(i int) []byte {
		return fmt.Appendf(nil, `{"allowed":%t,"reason":"r%d","headers":{"x-nexus-subject":"u%d"}}`, i%2 == 0, i, i)
	}
	const n = 3 * memoSlots
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range n {
				j := (i*7 + g*memoSlots) % n
				for _, envoy := range []bool{false, true} {
					d, err := p.parseResult(doc(j), envoy)
					if err != nil {
						t.Error(err)
						return
					}
					want := fmt.Sprintf("r%d", j)
					if d.Reason != want || d.Allowed != (j%2 == 0) || len(d.Headers) != 1 || d.Headers[0].Value != fmt.Sprintf("u%d", j) {
						t.Errorf("result %d (envoy %t): got %+v", j, envoy, d)
						return
					}
				}
			}
		})
	}
	wg.Wait()

	if _, err := p.parseResult(doc(1), true); err != nil {
		t.Fatal(err)
	}
	if e, _ := p.results.get(append([]byte{resultKind(true)}, doc(1)...)); e == nil || e.d.Reason != "r1" {
		t.Fatalf("a result just parsed is not in the memo: %v", e)
	}
	// A document that does not parse is not memoised.
	bad := []byte(`{"allowed":"yes"}`)
	if _, err := p.parseResult(bad, false); err == nil {
		t.Fatal("a non-boolean allowed parsed")
	}
	if e, _ := p.results.get(append([]byte{resultKind(false)}, bad...)); e != nil {
		t.Fatalf("a result that failed to parse was memoised: %+v", e.d)
	}
}

// TestAnswerDecision: a native answer's decision is the one its result
// document parses as, for every shape of answer (Envoy's allow, its
// denials with a status, a body and one or two headers, an application
// check's allow and denial).
func TestAnswerDecision(t *testing.T) {
	json := builtins.Header{Key: "content-type", Value: "application/json"}
	for _, a := range []builtins.Answer{
		{Envoy: true, Allowed: true, Reason: "rebac", Subject: `a"<b`, NHeaders: 2,
			Headers: [2]builtins.Header{{Key: "x-nexus-decision", Value: "rebac"}, {Key: "x-nexus-subject", Value: `a"<b`}}},
		{Envoy: true, Reason: "no_grant", Subject: "bob", Status: 403, Body: `{"error":"forbidden"}`, NHeaders: 2,
			Headers: [2]builtins.Header{json, {Key: "x-nexus-decision", Value: "no_grant"}}},
		{Envoy: true, Reason: "no_subject", Status: 401, Body: "{}", NHeaders: 2,
			Headers: [2]builtins.Header{json, {Key: "www-authenticate", Value: `Bearer realm="nexus"`}}},
		{Envoy: true, Reason: "invalid_request", Status: 400, Body: "{}", NHeaders: 1, Headers: [2]builtins.Header{json}},
		{Allowed: true, Reason: "rbac"},
		{Reason: "tenant_mismatch"},
	} {
		parse := result.Parse
		if a.Envoy {
			parse = result.ParseEnvoy
		}
		doc := a.AppendJSON(nil)
		want, err := parse(doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if got := answerDecision(&a); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", doc, got, want)
		}
	}
}
