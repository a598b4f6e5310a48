package proxywasm

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func TestPairsRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		pairs [][2]string
	}{
		{"empty", nil},
		{"one", [][2]string{{":method", "GET"}}},
		{"several", [][2]string{{":path", "/a?b"}, {"x", ""}, {"", "v"}, {"x", "second"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePairs(EncodePairs(tc.pairs))
			if err != nil {
				t.Fatal(err)
			}
			var got [][2]string
			p.Each(func(k, v []byte) bool {
				got = append(got, [2]string{string(k), string(v)})
				return true
			})
			if !slices.Equal(got, tc.pairs) || p.Len() != len(tc.pairs) {
				t.Fatalf("round trip %v, want %v", got, tc.pairs)
			}
		})
	}
	p, _ := ParsePairs(EncodePairs([][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}}))
	if v, ok := p.Get("a"); !ok || v != "1" {
		t.Fatalf("Get(a) = %q, %v", v, ok)
	}
	if _, ok := p.Get("c"); ok {
		t.Fatal("Get(c) found")
	}
}

func TestParsePairsRejects(t *testing.T) {
	good := EncodePairs([][2]string{{"k", "v"}})
	noNUL := slices.Clone(good)
	noNUL[len(noNUL)-1] = 'x'
	huge := slices.Clone(good)
	binary.LittleEndian.PutUint32(huge, 1<<30)
	long := slices.Clone(good)
	binary.LittleEndian.PutUint32(long[4:], 100)
	tests := []struct {
		name string
		b    []byte
	}{
		{"short", []byte{1, 0}},
		{"count too big", huge},
		{"no sizes", []byte{1, 0, 0, 0}},
		{"missing NUL", noNUL},
		{"key past end", long},
		{"trailing", append(slices.Clone(good), 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParsePairs(tc.b); !errors.Is(err, ErrBadPairs) {
				t.Fatalf("ParsePairs error %v, want ErrBadPairs", err)
			}
		})
	}
}

func FuzzParsePairs(f *testing.F) {
	f.Add(EncodePairs([][2]string{{":method", "GET"}, {":path", "/"}}))
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 0, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePairs(b)
		if err != nil {
			return
		}
		var pairs [][2]string
		p.Each(func(k, v []byte) bool {
			pairs = append(pairs, [2]string{string(k), string(v)})
			return true
		})
		if re := EncodePairs(pairs); len(b) > 0 && !slices.Equal(re, b) {
			t.Fatalf("re-encoding differs: %x vs %x", re, b)
		}
	})
}

func TestArena(t *testing.T) {
	var a arena
	s := a.alloc(100)
	if len(s) != 100 || !a.busy {
		t.Fatalf("first block: len %d busy %v", len(s), a.busy)
	}
	// The scratch is busy: the next block is allocated and kept live.
	b := a.alloc(10)
	if len(a.live) != 1 {
		t.Fatalf("live %d, want 1", len(a.live))
	}
	if got, ok := a.take(addrOf(b[:cap(b)]), 10); !ok || len(got) != 10 || len(a.live) != 0 {
		t.Fatalf("take live block: ok %v len %d live %d", ok, len(got), len(a.live))
	}
	if _, ok := a.take(addrOf(s), 100); !ok || a.busy {
		t.Fatal("take scratch failed")
	}
	if _, ok := a.take(addrOf(s), 100); ok {
		t.Fatal("took the scratch twice")
	}
	// Bigger than the scratch: allocated; reserve then makes the scratch fit.
	big := a.alloc(minScratch + 1)
	if len(a.live) != 1 || len(big) != minScratch+1 {
		t.Fatal("big block not live")
	}
	a.reset()
	if len(a.live) != 0 || a.busy {
		t.Fatal("reset left blocks")
	}
	a.reserve(minScratch * 4)
	if s := a.alloc(minScratch * 4); len(a.live) != 0 || len(s) != minScratch*4 {
		t.Fatal("reserved scratch not used")
	}
	if z := a.alloc(0); len(z) != 0 || cap(z) == 0 {
		t.Fatal("zero-size block must still have an address")
	}
}

func TestStatusErr(t *testing.T) {
	if statusErr("x", StatusOK) != nil {
		t.Fatal("OK is not an error")
	}
	var se *StatusError
	if err := statusErr("proxy_http_call", StatusBadArgument); !errors.As(err, &se) || se.Status != StatusBadArgument {
		t.Fatalf("statusErr = %v", err)
	}
}
