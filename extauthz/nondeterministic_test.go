package extauthz_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/internal/fixture"
	"github.com/nexuspdp/nexus/pdp"
)

// TestNondeterministicPolicyNotCached: a policy that puts the clock in a
// header answers two identical ext_authz checks over gRPC with two
// different headers, each logged as a decision that did not go through
// the cache; with --cache-nondeterministic the second answer is the
// first, from the cache.
func TestNondeterministicPolicyNotCached(t *testing.T) {
	b, err := compiler.Compile(context.Background(), compiler.Options{
		Modules: map[string]string{"clock.rego": `package clock
import rego.v1
result := {"allowed": true, "headers": {"x-now": sprintf("%d", [time.now_ns()])}}
`},
		Entrypoints: []string{"clock/result"}, Revision: "clock",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		optIn bool
	}{{"default", false}, {"opted in", true}} {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, func(c *testConfig) {
				c.Core.Policy = b
				c.Core.EnvoyEntrypoint, c.Core.AuthzEntrypoint = "clock/result", pdp.Disabled
				c.Core.CacheNondeterministic = tt.optIn
			})
			req := fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})
			var got [2]string
			for i := range got {
				resp, err := ts.grpc.Check(t.Context(), req)
				if err != nil {
					t.Fatal(err)
				}
				if got[i] = headerValue(resp.GetOkResponse().GetHeaders(), "x-now"); got[i] == "" {
					t.Fatalf("check %d: no x-now header: %v", i, resp)
				}
			}
			if (got[0] == got[1]) != tt.optIn {
				t.Fatalf("x-now %s then %s: want them equal only when opted in (%v)", got[0], got[1], tt.optIn)
			}
			wantCache := []string{"disabled", "disabled"}
			if tt.optIn {
				wantCache = []string{"miss", "hit"}
			}
			lines := waitLines(t, ts, 2)
			for i, line := range lines {
				var ev struct {
					Cache        string `json:"cache"`
					DataRevision uint64 `json:"data_revision"`
				}
				if err := json.Unmarshal([]byte(line), &ev); err != nil {
					t.Fatal(err)
				}
				if ev.Cache != wantCache[i] || ev.DataRevision == 0 {
					t.Fatalf("decision %d logged with cache %q, data revision %d; want %q and the store's revision", i, ev.Cache, ev.DataRevision, wantCache[i])
				}
			}
		})
	}
}

// waitLines waits for n lines in the decision log, which is written
// asynchronously.
func waitLines(t *testing.T, ts *testServer, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := strings.TrimSpace(ts.log.String())
		if lines := strings.Split(out, "\n"); out != "" && len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("decision log has not %d lines after 5s:\n%s", n, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
