package pdp_test

import (
	"encoding/json"
	"testing"

	"github.com/nexuspdp/nexus/pdp"
)

// FuzzCheckInput: Check.Input writes what json.Marshal writes for the
// check, whatever its strings and attributes hold.
func FuzzCheckInput(f *testing.F) {
	f.Add("user", "alice", "read", "file", "report.pdf", "acme", "locked", "yes", false)
	f.Add("user", "a<b>&\u2028", "", "", "", "", "", "", true)
	f.Add("u", "\xff\xfe", "r", "t", "i\n", "t\"", "k\\", "\x00", true)
	f.Fuzz(func(t *testing.T, st, sid, action, rt, rid, tenant, key, val string, number bool) {
		c := pdp.Check{
			Subject:  pdp.Subject{Type: st, ID: sid},
			Action:   action,
			Resource: pdp.Resource{Type: rt, ID: rid, Tenant: tenant},
		}
		if key != "" {
			var v any = val
			if number {
				v = json.Number("12.50")
			}
			c.Subject.Attributes = map[string]any{key: v, "z" + key: val}
			c.ActionAttributes = map[string]any{key: val}
			c.Resource.Attributes = map[string]any{key: v}
			c.Context = map[string]any{key: map[string]any{"n": v}}
		}
		want, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Input(); string(got) != string(want) {
			t.Fatalf("Input writes\n%s\njson.Marshal\n%s", got, want)
		}
	})
}
