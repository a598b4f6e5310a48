package appapi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// TestWriteDecisionMatchesWriteJSON: the reflection-free answers of
// /allowed and AuthZEN's evaluation are byte for byte what encoding/json
// writes, whatever reason a policy returns.
func TestWriteDecisionMatchesWriteJSON(t *testing.T) {
	reasons := []string{"", "rbac", "no_grant", `q"uote\`, "<a&b>", "\u2028\u2029", "\x00\x1f\x7f", "\xff\xfe", "ünï", "\t\r\n"}
	for _, allowed := range []bool{false, true} {
		for _, reason := range reasons {
			d := pdp.Decision{}
			d.Allowed, d.Reason = allowed, reason
			for _, c := range []struct {
				name  string
				fast  func(http.ResponseWriter, pdp.Decision)
				value any
			}{
				{"permit", writePermit, permitResponse(d)},
				{"authzen", writeAuthZEN, authzenResponse(d)},
			} {
				got, want := httptest.NewRecorder(), httptest.NewRecorder()
				c.fast(got, d)
				wire.WriteJSON(want, http.StatusOK, c.value)
				if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != want.Header().Get("Content-Type") {
					t.Errorf("%s %v %q: %d %q %q, encoding/json: %d %q %q", c.name, allowed, reason,
						got.Code, got.Header().Get("Content-Type"), got.Body, want.Code, want.Header().Get("Content-Type"), want.Body)
				}
			}
		}
	}
}
