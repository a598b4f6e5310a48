package index

import (
	"bytes"
	"testing"

	"github.com/nexuspdp/nexus/api"
)

func FuzzKeyRoundTrip(f *testing.F) {
	f.Add(uint64(1), "d1", uint64(2), uint64(0), uint64(3), "alice")
	f.Add(uint64(300), "a-b.c", uint64(20000), uint64(7), uint64(128), "x")
	f.Fuzz(func(t *testing.T, ot uint64, oid string, rel, sr, st uint64, sid string) {
		if !api.ValidID(oid) || !api.ValidID(sid) {
			return
		}
		n := IDs{OT: ot, Rel: rel, ST: st, SR: sr}
		k := AppendObjKey(nil, n, oid, sid)
		got, o, s, err := DecodeObjKey(k)
		if err != nil || got != n || string(o) != oid || string(s) != sid {
			t.Fatalf("obj key %x: %+v %q %q %v", k, got, o, s, err)
		}
		k2 := AppendSubjKey(nil, n, oid, sid)
		got, o, s, err = DecodeSubjKey(k2)
		if err != nil || got != n || string(o) != oid || string(s) != sid {
			t.Fatalf("subj key %x: %+v %q %q %v", k2, got, o, s, err)
		}
		// The prefixes used by scans are prefixes of the key.
		if !bytes.HasPrefix(k, AppendObjPrefix(nil, ot, oid)) || !bytes.HasPrefix(k2, AppendSubjPrefix(nil, st, sid)) {
			t.Fatal("prefix mismatch")
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	f.Add([]byte{1, 'a', 0, 2, 0, 3, 'b'})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, k []byte) {
		// Corrupt keys are errors, never panics; a key that decodes
		// re-encodes to a key that decodes to the same parts (byte equality
		// does not hold for over-long varints, which we never write).
		if n, o, s, err := DecodeObjKey(k); err == nil {
			re := AppendObjKey(nil, n, string(o), string(s))
			n2, o2, s2, err := DecodeObjKey(re)
			if err != nil || n2 != n || !bytes.Equal(o2, o) || !bytes.Equal(s2, s) {
				t.Fatalf("obj %x re-encodes to %x which decodes differently: %v", k, re, err)
			}
		}
		_, _, _, _ = DecodeSubjKey(k)
	})
}

func TestKeyOrderDirectFirst(t *testing.T) {
	direct := AppendObjKey(nil, IDs{OT: 1, Rel: 2, ST: 3, SR: 0}, "d", "zzz")
	userset := AppendObjKey(nil, IDs{OT: 1, Rel: 2, ST: 3, SR: 1}, "d", "aaa")
	if bytes.Compare(direct, userset) >= 0 {
		t.Fatal("direct subjects must sort before usersets")
	}
	// An object ID that is a prefix of another does not mix their keys.
	a := AppendObjPrefix(nil, 1, "d")
	b := AppendObjKey(nil, IDs{OT: 1, Rel: 2, ST: 3}, "d1", "x")
	if bytes.HasPrefix(b, a) {
		t.Fatal("prefix of d matches d1")
	}
}
