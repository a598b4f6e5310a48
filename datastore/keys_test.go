package datastore

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
		n := ids{ot: ot, rel: rel, st: st, sr: sr}
		k := appendObjKey(nil, n, oid, sid)
		got, o, s, err := decodeObjKey(k)
		if err != nil || got != n || string(o) != oid || string(s) != sid {
			t.Fatalf("obj key %x: %+v %q %q %v", k, got, o, s, err)
		}
		k2 := appendSubjKey(nil, n, oid, sid)
		got, o, s, err = decodeSubjKey(k2)
		if err != nil || got != n || string(o) != oid || string(s) != sid {
			t.Fatalf("subj key %x: %+v %q %q %v", k2, got, o, s, err)
		}
		// The prefixes used by scans are prefixes of the key.
		if !bytes.HasPrefix(k, appendObjPrefix(nil, ot, oid)) || !bytes.HasPrefix(k2, appendSubjPrefix(nil, st, sid)) {
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
		if n, o, s, err := decodeObjKey(k); err == nil {
			re := appendObjKey(nil, n, string(o), string(s))
			n2, o2, s2, err := decodeObjKey(re)
			if err != nil || n2 != n || !bytes.Equal(o2, o) || !bytes.Equal(s2, s) {
				t.Fatalf("obj %x re-encodes to %x which decodes differently: %v", k, re, err)
			}
		}
		_, _, _, _ = decodeSubjKey(k)
		_, _ = decodeChangeSet(&dict{ids: map[string]uint64{}, names: []string{""}}, 1, k)
	})
}

func TestKeyOrderDirectFirst(t *testing.T) {
	direct := appendObjKey(nil, ids{ot: 1, rel: 2, st: 3, sr: 0}, "d", "zzz")
	userset := appendObjKey(nil, ids{ot: 1, rel: 2, st: 3, sr: 1}, "d", "aaa")
	if bytes.Compare(direct, userset) >= 0 {
		t.Fatal("direct subjects must sort before usersets")
	}
	// An object ID that is a prefix of another does not mix their keys.
	a := appendObjPrefix(nil, 1, "d")
	b := appendObjKey(nil, ids{ot: 1, rel: 2, st: 3}, "d1", "x")
	if bytes.HasPrefix(b, a) {
		t.Fatal("prefix of d matches d1")
	}
}
