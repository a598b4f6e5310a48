package pdp_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/nexuspdp/nexus/pdp"
)

// FuzzParseRevision: a token is accepted only in the one form a write
// response gives it (a canonical decimal from 1 to 2^64-1); anything else
// is ErrBadRequest.
func FuzzParseRevision(f *testing.F) {
	for _, s := range []string{"1", "42", "18446744073709551615", "18446744073709551616", "0", "01", "-1", "+1", " 1", "1e3", "0x10", "", "１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rev, err := pdp.ParseRevision(s)
		if err != nil {
			if !errors.Is(err, pdp.ErrBadRequest) || pdp.Code(err) != pdp.CodeBadRequest {
				t.Fatalf("ParseRevision(%q): %v is not a bad request", s, err)
			}
			return
		}
		if rev == 0 || strconv.FormatUint(uint64(rev), 10) != s {
			t.Fatalf("ParseRevision(%q) = %d, not its canonical form", s, rev)
		}
	})
}
