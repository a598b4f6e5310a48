package extauthz_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/nexuspdp/nexus/internal/fixture"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opalog "github.com/nexuspdp/nexus/opacompat/decisionlogs"
	"github.com/nexuspdp/nexus/pdp"
)

// discardSink takes decision records and keeps none: what the decision
// path itself pays for a sink.
type discardSink struct{}

func (discardSink) Record(*pdp.DecisionRecord) {}

// BenchmarkCheckServerSideSink is BenchmarkCheckServerSide with a sink
// that discards the records: the cost on the decision path alone of
// handing the input and the raw result over.
func BenchmarkCheckServerSideSink(b *testing.B) {
	for _, cache := range []bool{false, true} {
		ts := newTestServer(b, func(c *testConfig) {
			c.Core.CacheDisabled = !cache
			c.Core.DecisionLog = nil
			c.Core.DecisionSink = discardSink{}
		})
		name := "RBAC/cache=off"
		if cache {
			name = "RBAC/cache=on"
		}
		req := fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := fixture.ProcessCPU()
			for b.Loop() {
				resp, err := ts.srv.CheckDirect(ctx, req)
				if err != nil || resp.GetStatus().GetCode() != 0 {
					b.Fatal(err, resp)
				}
			}
			b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkCheckServerSideOPALog is BenchmarkCheckServerSide with the
// decision log in OPA's format on: every decision goes to the console
// (discarded) and is uploaded to a real collector every 10ms.
func BenchmarkCheckServerSideOPALog(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer collector.Close()
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"c": {"url": "` + collector.URL + `"}}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, cache := range []bool{false, true} {
		lg, err := opalog.New(opalog.Config{
			Labels: map[string]string{"id": "bench", "version": "bench"}, Bundle: "nexus",
			Console: io.Discard, Service: svcs["c"], MinDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond,
		})
		if err != nil {
			b.Fatal(err)
		}
		ts := newTestServer(b, func(c *testConfig) {
			c.Core.CacheDisabled = !cache
			c.Core.DecisionLog = nil
			c.Core.DecisionSink = lg
		})
		for _, bc := range []struct {
			name string
			req  *authv3.CheckRequest
		}{
			{"RBAC", fixture.EnvoyRequest("GET", "/tenants/acme/files/report.pdf", map[string]string{"x-user": "alice"})},
			{"ReBACDepth3", fixture.EnvoyRequest("GET", "/files/report.pdf", map[string]string{"x-user": "bob"})},
		} {
			name := bc.name + "/cache=off"
			if cache {
				name = bc.name + "/cache=on"
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				cpu0 := fixture.ProcessCPU()
				dropped0 := lg.Dropped()
				for b.Loop() {
					resp, err := ts.srv.CheckDirect(ctx, bc.req)
					if err != nil || resp.GetStatus().GetCode() != 0 {
						b.Fatal(err, resp)
					}
				}
				b.ReportMetric(float64(fixture.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(lg.Dropped()-dropped0)/float64(b.N), "dropped/op")
			})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := lg.Close(ctx); err != nil {
			b.Error(err)
		}
		cancel()
	}
}
