//go:build race

package lab

// raceEnabled trims the slowest tests under the race detector.
const raceEnabled = true
