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
		// Corrupt keys are errors, never panics; good keys re-encode to themselves.
		if n, o, s, err := decodeObjKey(k); err == nil && api.ValidID(string(o)) && api.ValidID(string(s)) {
			if re := appendObjKey(nil, n, string(o), string(s)); !bytes.Equal(re, k) && isCanonicalVarints(k) {
				t.Fatalf("obj %x re-encodes to %x", k, re)
			}
		}
		_, _, _, _ = decodeSubjKey(k)
		_, _ = decodeChangeSet(&dict{ids: map[string]uint64{}, names: []string{""}}, 1, k)
	})
}

// isCanonicalVarints is false for keys with over-long varints, which decode
// but do not re-encode byte for byte.
func isCanonicalVarints(k []byte) bool {
	for i := 0; i+1 < len(k); i++ {
		if k[i] == 0x80 && k[i+1] == 0 {
			return false
		}
	}
	return true
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
