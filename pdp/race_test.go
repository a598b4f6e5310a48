//go:build race

package pdp_test

// raceEnabled: the race detector slows evaluation about tenfold.
const raceEnabled = true
