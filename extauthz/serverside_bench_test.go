package extauthz_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/bundle"
	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/defaults/allowall"
	"github.com/nexuspdp/nexus/defaults/policy"
	"github.com/nexuspdp/nexus/internal/fixture"
)

// allowOnly compiles the embedded allow-only policy (the baseline that
// decides nothing) once per test binary.
var allowOnly = sync.OnceValues(func() (*bundle.Bundle, error) {
	mods, err := fixture.Modules(allowall.FS)
	if err != nil {
		return nil, err
	}
	return compiler.Compile(context.Background(), compiler.Options{
		Modules: mods, Revision: "allow-only",
		Entrypoints: []string{policy.EnvoyEntrypoint, policy.AuthzEntrypoint},
	})
})

// benchPolicy is a policy the server-side benchmarks run.
type benchPolicy struct {
	name string
	b    *bundle.Bundle
}

// benchPolicies are the policies the server-side benchmarks compare: the
// default policy and the allow-only
// baseline, on the same server and interface, so "above allow-only" is
// the difference of two lines.
func benchPolicies(b *testing.B) []benchPolicy {
	b.Helper()
	ao, err := allowOnly()
	if err != nil {
		b.Fatal(err)
	}
	return []benchPolicy{{"default", fixture.Bundle(b)}, {"allow-only", ao}}
}

// BenchmarkCheckServerSidePolicies is BenchmarkCheckServerSide for the
// default policy and the allow-only baseline.
func BenchmarkCheckServerSidePolicies(b *testing.B) {
	for _, pol := range benchPolicies(b) {
		for _, cache := range []bool{false, true} {
			ts := newTestServer(b, func(c *testConfig) {
				c.Core.CacheDisabled = !cache
				c.Core.DecisionLog = nil
				c.Core.Policy = pol.b
			})
			for _, bc := range []struct {
				name string
				req  *authv3.CheckRequest
			}{
				{"RBAC", fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})},
				{"ReBACDepth3", fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})},
			} {
				b.Run(pol.name+"/"+bc.name+"/"+cacheName(cache), func(b *testing.B) {
					ctx := context.Background()
					b.ReportAllocs()
					cpu0 := fixture.ProcessCPU()
					for b.Loop() {
						resp, err := ts.srv.CheckDirect(ctx, bc.req)
						if err != nil || resp.GetStatus().GetCode() != 0 {
							b.Fatal(err, resp)
						}
					}
					b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

func cacheName(on bool) string {
	if on {
		return "cache=on"
	}
	return "cache=off"
}

// BenchmarkHTTPServerSide is the server's own cost of one application
// check on the HTTP listener (routing, API key, body decoding, decision,
// response writing), through the real handler without the network: the
// Permit-compatible /allowed and AuthZEN's evaluation, cache on and off,
// for the default policy and the allow-only baseline.
func BenchmarkHTTPServerSide(b *testing.B) {
	for _, pol := range benchPolicies(b) {
		for _, cache := range []bool{false, true} {
			ts := newTestServer(b, func(c *testConfig) {
				c.Core.CacheDisabled = !cache
				c.Core.DecisionLog = nil
				c.Core.Policy = pol.b
			})
			h := ts.srv.HTTPHandler()
			for _, bc := range []struct{ name, path, body, want string }{
				{"allowed/RBAC", "/allowed", `{"user":"alice","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`, `"allow":true`},
				{"allowed/ReBACDepth3", "/allowed", `{"user":"bob","action":"read","resource":{"type":"file","key":"report.pdf","tenant":"acme"}}`, `"allow":true`},
				{"authzen/RBAC", "/access/v1/evaluation", `{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf","properties":{"tenant":"acme"}}}`, `"decision":true`},
				{"authzen/ReBACDepth3", "/access/v1/evaluation", `{"subject":{"type":"user","id":"bob"},"action":{"name":"read"},"resource":{"type":"file","id":"report.pdf"}}`, `"decision":true`},
			} {
				b.Run(pol.name+"/"+bc.name+"/"+cacheName(cache), func(b *testing.B) {
					body := strings.NewReader(bc.body)
					req := httptest.NewRequest(http.MethodPost, bc.path, body)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+testAppKey)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), bc.want) {
						b.Fatalf("%s: %d %s, want 200 with %s", bc.path, rec.Code, rec.Body, bc.want)
					}
					b.ReportAllocs()
					cpu0 := fixture.ProcessCPU()
					for b.Loop() {
						body.Reset(bc.body)
						rec.Body.Reset()
						h.ServeHTTP(rec, req)
						if rec.Code != http.StatusOK {
							b.Fatal(rec.Code, rec.Body)
						}
					}
					b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				})
			}
		}
	}
}

// BenchmarkCheckServerSideMisses is an uncached Envoy check with the
// decision cache on and off: every request names another subject, more
// of them than the cache holds, so that with the cache on every check
// misses, is decided and is inserted. The difference of the two lines is
// what the cache costs a check it cannot answer.
func BenchmarkCheckServerSideMisses(b *testing.B) {
	const subjects = 250_000 // more than the cache's default 100,000
	reqs := make([]*authv3.CheckRequest, subjects)
	for i := range reqs {
		reqs[i] = fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "u" + strconv.Itoa(i)})
	}
	for _, cache := range []bool{false, true} {
		ts := newTestServer(b, func(c *testConfig) {
			c.Core.CacheDisabled = !cache
			c.Core.DecisionLog = nil
		})
		b.Run(cacheName(cache), func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := fixture.ProcessCPU()
			i := 0
			for b.Loop() {
				resp, err := ts.srv.CheckDirect(ctx, reqs[i%subjects])
				if err != nil || resp.GetStatus().GetCode() != int32(codes.PermissionDenied) {
					b.Fatal(err, resp)
				}
				i++
			}
			b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
