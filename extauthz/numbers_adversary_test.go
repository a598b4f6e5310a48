package extauthz_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// TestNumericHeaderMutations: a user's policy that reads a number from a
// header the client sets (a declared size against the caller's limit, in
// the style of opa-envoy-plugin's examples) decides every spelling of that
// number as OPA's evaluator does over the same CheckRequest: a sign in
// front, a leading or trailing dot, an exponent, hexadecimal, underscores,
// spaces, words. No spelling may be allowed where OPA denies.
func TestNumericHeaderMutations(t *testing.T) {
	ctx := context.Background()
	p := &suitePolicy{
		name: "numeric-header",
		modules: map[string]string{"policy.rego": `package envoy.authz

import input.attributes.request.http

default allow := false

allow if {
	http.method == "PUT"
	not too_large
}

too_large if to_number(http.headers["content-length"]) > data.limits[http.headers["x-tier"]]

too_large if not http.headers["content-length"]
`},
		data: []byte(`{"limits": {"basic": 1000, "gold": 1e4}}`),
	}
	r := newSuiteRig(t, p)
	spellings := []string{
		"5000", "+5000", "5e3", "+5e3", "5E+3", "5000.", "5000.0", ".5e4", "0x1388", "0x1.388p12", "0X1388P0",
		"5_000", "0b1001110001000", "0o11610", "05000", "-5000", "-0", "+0", "0", "999", "1000", "1000.0001",
		" 5000", "5000 ", "5000\t", "inf", "+Inf", "NaN", "infinity", "1e400", "-1e400", "1e-400", "5e", "+", "-",
		".", "", "5,000", "5000abc", "١٢٣", "0x", "1__0", "_5000", "5000_", "9223372036854775808", "1e3000",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		// Random spellings built from the pieces above.
		parts := []string{"+", "-", ".", "_", "e", "E", "x", "p", "0", "5", "9", " "}
		var b strings.Builder
		for range 1 + rng.IntN(7) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		spellings = append(spellings, b.String())
	}
	for _, tier := range []string{"basic", "gold"} {
		for _, n := range spellings {
			req := fixture.EnvoyRequest("PUT", "/upload", map[string]string{"content-length": n, "x-tier": tier})
			want, ok, err := r.opaConverted(ctx, req)
			if err != nil || !ok {
				t.Fatalf("OPA on %q: %v %v", n, ok, err)
			}
			resp, err := r.ts.srv.CheckDirect(ctx, req)
			if err != nil {
				t.Fatalf("nexus on %q: %v", n, err)
			}
			if got := allowed(resp); got != decisionAllowed(want) {
				t.Errorf("content-length %q, tier %s: nexus allowed=%v, OPA %v", n, tier, got, jsonText(want))
			}
		}
	}
}
