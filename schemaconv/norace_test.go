//go:build !race

package schemaconv_test

const raceEnabled = false
