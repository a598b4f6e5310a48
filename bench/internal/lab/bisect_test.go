package lab

import (
	"errors"
	"math"
	"testing"
)

func TestBisect(t *testing.T) {
	for _, tc := range []struct {
		name          string
		lo, hi, limit float64
		n             int
	}{
		{"limit in the upper half", 1000, 1250, 1200, 4},
		{"limit in the lower half", 1000, 1250, 1010, 4},
		{"limit just under the failing step", 800, 1000, 999, 6},
		{"no probes", 1000, 1250, 1100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var probes []float64
			got, err := Bisect(tc.lo, tc.hi, tc.n, func(r float64) (bool, error) {
				probes = append(probes, r)
				return r <= tc.limit, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(probes) != tc.n {
				t.Fatalf("%d probes, want %d", len(probes), tc.n)
			}
			if got > tc.limit {
				t.Fatalf("Bisect = %.1f, above the limit %.1f", got, tc.limit)
			}
			// After n halvings (in log scale) the bracket is (hi/lo)^(1/2^n).
			width := math.Pow(tc.hi/tc.lo, 1/math.Pow(2, float64(tc.n)))
			if got*width < tc.limit {
				t.Fatalf("Bisect = %.1f, more than a bracket (x%.4f) under the limit %.1f", got, width, tc.limit)
			}
		})
	}
	if _, err := Bisect(1000, 900, 3, func(float64) (bool, error) { return true, nil }); !errors.Is(err, ErrConfig) {
		t.Fatalf("a failing rate under the passing one: %v, want ErrConfig", err)
	}
	boom := errors.New("boom")
	if got, err := Bisect(1000, 1250, 3, func(float64) (bool, error) { return false, boom }); !errors.Is(err, boom) || got != 1000 {
		t.Fatalf("a probe error: %v, %v", got, err)
	}
}
