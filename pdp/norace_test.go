//go:build !race

package pdp_test

const raceEnabled = false
