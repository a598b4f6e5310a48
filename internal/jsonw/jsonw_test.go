package jsonw

import (
	"encoding/json"
	"math"
	"testing"
)

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"uote\\", "<a&b>", "\u2028\u2029", "\x00\x1f\x7f", "\xff\xfe", "ünï", "\t\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Fatalf("String(%q) = %s, encoding/json gives %s", s, got, want)
		}
	})
}

func FuzzFloat(f *testing.F) {
	for _, x := range []float64{0, 1, -1, 3.25, 1e-7, 1e-6, 123456789.125, 1e20, 1e21, 1e300, -2.5e-9, math.SmallestNonzeroFloat64} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			if got := Float(nil, x); string(got) != "null" {
				t.Fatalf("Float(%v) = %s, want null", x, got)
			}
			return
		}
		want, _ := json.Marshal(x)
		if got := Float(nil, x); string(got) != string(want) {
			t.Fatalf("Float(%v) = %s, encoding/json gives %s", x, got, want)
		}
	})
}

// TestStringEveryByte puts every byte value at every position of strings
// around the eight bytes String skips at once, and compares with
// encoding/json.
func TestStringEveryByte(t *testing.T) {
	for n := 1; n <= 18; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := make([]byte, n)
				for i := range b {
					b[i] = 'a' + byte(i%26)
				}
				b[pos] = byte(c)
				want, _ := json.Marshal(string(b))
				if got := String(nil, string(b)); string(got) != string(want) {
					t.Fatalf("String(%q) = %s, encoding/json gives %s", b, got, want)
				}
			}
		}
	}
}
