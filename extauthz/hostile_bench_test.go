package extauthz_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/extauthz"
)

// hostileBatch is an AuthZEN batch of n evaluations that all inherit the
// top-level subject, whose properties nest depth arrays deep: a small body
// (about 2×depth + 40×n bytes) that asks for n evaluations of a deep input.
func hostileBatch(n, depth int) string {
	var b strings.Builder
	b.WriteString(`{"subject":{"type":"user","id":"bob","properties":{"p":`)
	b.WriteString(strings.Repeat("[", depth))
	b.WriteString(strings.Repeat("]", depth))
	b.WriteString(`}},"action":{"name":"read"},"evaluations":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		// A resource each: no evaluation answered from the decision cache.
		fmt.Fprintf(&b, `{"resource":{"type":"file","id":"f%d"}}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// cpuTime is the process' user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHostileBatch sends one application request built to burn CPU:
// 1,000 evaluations whose subject's properties nest 9,000 deep
// ("deep-9000"), and the worst such request within the limits: as many
// evaluations as a batch may hold, nested as deep as a body may
// ("within-limits"). It reports the process' CPU time per request
// (cpu-ms/op) and the answer's status.
//
//	go test ./extauthz -run '^$' -bench BenchmarkHostileBatch -benchtime 20x
func BenchmarkHostileBatch(b *testing.B) {
	ts := newTestServer(b, func(c *testConfig) { c.MaxBatch = 1000 })
	h := ts.srv.HTTPHandler()
	for _, bc := range []struct {
		name     string
		n, depth int
	}{
		{"deep-9000", 1000, 9000},
		// MaxDepth (64) less the three levels around the array.
		{"within-limits", extauthz.DefaultMaxBatch, 61},
	} {
		b.Run(bc.name, func(b *testing.B) {
			body := hostileBatch(bc.n, bc.depth)
			status := 0
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuTime(b)
			for range b.N {
				req := httptest.NewRequest(http.MethodPost, "/access/v1/evaluations", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+testAppKey)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				status = rec.Code
			}
			b.ReportMetric(float64(cpuTime(b)-start)/1e6/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(status), "status")
		})
	}
}
