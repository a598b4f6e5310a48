package engine

import (
	"math/rand/v2"
	"testing"
)

// TestPlainLen holds plainLen's eight-bytes-at-a-time scan to the plain
// byte-by-byte definition: every byte value at every position of strings
// around the word size, and random strings rich in special bytes.
func TestPlainLen(t *testing.T) {
	ref := func(b []byte) int {
		for i, c := range b {
			if c == '"' || c == '\\' || c < 0x20 {
				return i
			}
		}
		return len(b)
	}
	check := func(b []byte) {
		t.Helper()
		if got, want := plainLen(b), ref(b); got != want {
			t.Fatalf("plainLen(%q) = %d, want %d", b, got, want)
		}
	}
	for n := 0; n <= 25; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := make([]byte, n)
				for i := range b {
					b[i] = 'a' + byte(i%26)
				}
				b[pos] = byte(c)
				check(b)
				if pos+1 < n {
					b[pos+1] = '"'
					check(b)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	pick := []byte{'"', '\\', 0, 0x1f, 0x20, 0x21, 0x22, 0x5b, 0x5c, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a'}
	for range 20000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = pick[r.IntN(len(pick))]
			} else {
				b[i] = byte(0x20 + r.IntN(0x60) + 0x80*r.IntN(2))
			}
		}
		check(b)
	}
}
