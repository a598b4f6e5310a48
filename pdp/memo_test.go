package pdp

import (
	"fmt"
	"sync"
	"testing"
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
