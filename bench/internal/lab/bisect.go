package lab

import (
	"fmt"
	"math"
)

// Bisect narrows a capacity limit known to lie between a passing rate lo
// and a failing rate hi (lo < hi): it probes the geometric middle n times,
// keeping the half in which the limit lies, and returns the highest rate
// that passed. probe runs one step at a rate and reports whether it
// passed.
func Bisect(lo, hi float64, n int, probe func(rate float64) (bool, error)) (float64, error) {
	if !(lo > 0) || !(hi > lo) || math.IsInf(hi, 0) {
		return lo, fmt.Errorf("%w: bisection needs 0 < passing rate %v < failing rate %v", ErrConfig, lo, hi)
	}
	for range n {
		mid := math.Sqrt(lo * hi)
		ok, err := probe(mid)
		if err != nil {
			return lo, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}
