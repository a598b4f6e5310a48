//go:build race

package schemaconv_test

// raceEnabled trims the differential test under the race detector, which
// slows its checks tenfold and finds nothing more in them (it has no
// goroutines of its own).
const raceEnabled = true
