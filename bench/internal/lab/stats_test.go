package lab

import (
	"math"
	"os"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

func tempDirOutsideTest() (string, error) { return os.MkdirTemp("", "nexus-bench-test-") }

func TestJudge(t *testing.T) {
	ok := LoadResult{Scheduled: 1000, Sent: 1000, Completed: 1000, Client: Percentiles{P99: 5}}
	tests := []struct {
		name   string
		mutate func(*LoadResult)
		pass   bool
	}{
		{"passes", func(*LoadResult) {}, true},
		{"1% dropped passes", func(r *LoadResult) { r.Dropped, r.Sent = 10, 990 }, true},
		{"1.1% dropped fails", func(r *LoadResult) { r.Dropped, r.Sent = 11, 989 }, false},
		{"a failure fails", func(r *LoadResult) { r.Failed = 1 }, false},
		{"P99 at the limit fails", func(r *LoadResult) { r.Client.P99 = 30 }, false},
		{"P99 just under passes", func(r *LoadResult) { r.Client.P99 = 29.99 }, true},
		{"nothing completed fails", func(r *LoadResult) { r.Completed = 0 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mutate(&r)
			got, reason := Judge(r, 30*time.Millisecond, DefaultMaxDropped)
			if got != tt.pass || (!got && reason == "") {
				t.Fatalf("Judge = %v (%q), want %v", got, reason, tt.pass)
			}
		})
	}
}

func TestBucketQuantile(t *testing.T) {
	inf := math.Inf(1)
	// 100 observations: 50 in (0, 1ms], 40 in (1ms, 2ms], 10 in (2ms, 4ms]
	h := &bucketHist{upper: []float64{0.001, 0.002, 0.004, inf}, cum: []float64{50, 90, 100, 100}, count: 100}
	tests := []struct {
		q, want float64
	}{
		{0.5, 0.001},
		{0.25, 0.0005},
		{0.7, 0.0015},
		{0.95, 0.003},
		{0.99, 0.0038},
	}
	for _, tt := range tests {
		if got := h.quantile(tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	over := &bucketHist{upper: []float64{0.001, inf}, cum: []float64{1, 10}, count: 10}
	if got := over.quantile(0.99); got != 0.001 {
		t.Errorf("quantile in +Inf = %v, want the highest finite bound", got)
	}
	before := &bucketHist{upper: h.upper, cum: []float64{10, 10, 10, 10}, count: 10}
	d := h.minus(before)
	if d.count != 90 || d.cum[0] != 40 || d.quantile(0.5) <= 0.001 {
		t.Errorf("delta %+v, median %v", d, d.quantile(0.5))
	}
}

func TestLimitFor(t *testing.T) {
	if LimitFor("rbac") != 30*time.Millisecond || LimitFor("rebac3") != 40*time.Millisecond || LimitFor("rebac0") != 40*time.Millisecond {
		t.Fatal("limits: want 30 ms for rbac and 40 ms for ReBAC")
	}
}

func TestStatusCode(t *testing.T) {
	for _, code := range []int32{0, 7, 16, 13} {
		b, err := proto.Marshal(&authv3.CheckResponse{Status: &status.Status{Code: code, Message: "m"}})
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := statusCode(b)
		if err != nil || got != code || (code != 0 && !ok) {
			t.Errorf("code %d: got %d, %v, %v", code, got, ok, err)
		}
	}
	if _, _, err := statusCode([]byte{0x0a, 0xff}); err == nil {
		t.Error("truncated response accepted")
	}
}
