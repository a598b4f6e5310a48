//go:build race

package bench

// raceEnabled trims the slowest tests under the race detector.
const raceEnabled = true
