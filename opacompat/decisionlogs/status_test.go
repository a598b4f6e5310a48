package decisionlogs_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/plugins/status"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opalog "github.com/nexuspdp/nexus/opacompat/decisionlogs"
	"github.com/nexuspdp/nexus/pdp"
)

// statusService is a control plane: it decodes every report with OPA's
// own status type.
type statusService struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reports []status.UpdateRequestV1
	paths   []string
	errs    []string
}

func newStatusService(t *testing.T) *statusService {
	t.Helper()
	s := &statusService{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var rep status.UpdateRequestV1
		err := json.Unmarshal(body, &rep)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			s.errs = append(s.errs, fmt.Sprintf("%s %s: %v", r.Method, body, err))
			http.Error(w, "bad report", http.StatusBadRequest)
			return
		}
		s.reports = append(s.reports, rep)
		s.paths = append(s.paths, r.URL.Path)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *statusService) wait(t *testing.T, n int) ([]status.UpdateRequestV1, []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		reps, paths, errs := append([]status.UpdateRequestV1(nil), s.reports...), append([]string(nil), s.paths...), s.errs
		s.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("status service: %v", errs)
		}
		if len(reps) >= n {
			return reps, paths
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reports, want %d", len(reps), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStatusReports: reports reach /status/<partition> at start and on
// Notify, and OPA's UpdateRequestV1 reads labels, the bundles' status fed
// from a func, the plugins' states and the decision log's drop counter.
func TestStatusReports(t *testing.T) {
	ss := newStatusService(t)
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"cp": {"url": "` + ss.srv.URL + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := opalog.ParseStatus(json.RawMessage(`{"service": "cp", "partition_name": "edge"}`), svcs)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := opalog.New(opalog.Config{BufferType: opalog.BufferEvent, BufferSizeLimitEvents: 1, MinDelay: time.Hour, MaxDelay: time.Hour, Service: svcs["cp"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close(t.Context()) })
	// Three events into a buffer of one: two are dropped.
	for _, id := range []string{"d1", "d2", "d3"} {
		lg.Record(&pdp.DecisionRecord{ID: id, Path: "envoy/authz/allow", Input: []byte(`{}`), Result: []byte(`true`), Time: time.Now()})
	}
	for deadline := time.Now().Add(20 * time.Second); lg.Events() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events", lg.Events())
		}
	}
	activated := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var rev atomic.Value
	rev.Store("rev-7")
	var ready atomic.Bool
	cfg.Labels = map[string]string{"id": "proc-1", "version": "test", "region": "eu"}
	cfg.Interval = time.Hour
	cfg.DecisionLogs = lg
	cfg.Ready = ready.Load
	cfg.Bundles = func() []opalog.BundleStatus {
		return []opalog.BundleStatus{{Name: "authz", ActiveRevision: rev.Load().(string), LastSuccessfulActivation: activated,
			LastSuccessfulDownload: activated, LastSuccessfulRequest: activated, LastRequest: activated, HTTPCode: 200}}
	}
	r := opalog.NewReporter(*cfg)
	t.Cleanup(func() { _ = r.Close(t.Context()) })

	reps, paths := ss.wait(t, 1)
	first := reps[0]
	if paths[0] != "/status/edge" {
		t.Fatalf("path %s", paths[0])
	}
	if first.Labels["id"] != "proc-1" || first.Labels["region"] != "eu" {
		t.Fatalf("labels %v", first.Labels)
	}
	b := first.Bundles["authz"]
	if b == nil || b.Name != "authz" || b.ActiveRevision != "rev-7" || !b.LastSuccessfulActivation.Equal(activated) || b.HTTPCode != "200" {
		t.Fatalf("bundle status %+v", b)
	}
	for name, want := range map[string]plugins.State{"envoy_ext_authz_grpc": plugins.StateNotReady, "bundle": plugins.StateOK, "decision_logs": plugins.StateOK, "status": plugins.StateOK} {
		if got := first.Plugins[name]; got == nil || got.State != want {
			t.Errorf("plugin %s: %+v, want %s", name, got, want)
		}
	}
	if first.DecisionLogs == nil || first.DecisionLogs.Code != "" {
		t.Fatalf("decision_logs %+v", first.DecisionLogs)
	}
	prom, _ := first.Metrics["prometheus"].(map[string]any)
	if prom["counter_decision_logs_dropped_buffer_size_limit_exceeded"] != float64(2) {
		t.Fatalf("metrics %v", first.Metrics)
	}

	rev.Store("rev-8")
	ready.Store(true)
	r.Notify()
	reps, _ = ss.wait(t, 2)
	second := reps[1]
	if second.Bundles["authz"].ActiveRevision != "rev-8" || second.Plugins["envoy_ext_authz_grpc"].State != plugins.StateOK {
		t.Fatalf("second report %+v", second)
	}
}

// TestStatusConsole: a console report is one JSON line with OPA's
// console fields.
func TestStatusConsole(t *testing.T) {
	out := &syncBuffer{}
	r := opalog.NewReporter(opalog.StatusConfig{Labels: map[string]string{"id": "p"}, Console: out, Interval: time.Hour})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasSuffix(out.String(), "\n") {
		if time.Now().After(deadline) {
			t.Fatal("no console report")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	var rep status.UpdateRequestV1
	var fields map[string]any
	line := strings.TrimSpace(out.String())
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(line), &fields); err != nil {
		t.Fatal(err)
	}
	if rep.Labels["id"] != "p" || fields["msg"] != "Status Log" || fields["type"] != "openpolicyagent.org/status" || rep.Plugins["status"].State != plugins.StateOK {
		t.Fatalf("console report %s", line)
	}
}

func TestParseDecisionLogs(t *testing.T) {
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"a": {"url": "http://a.example"}, "b": {"url": "http://b.example"}}`))
	if err != nil {
		t.Fatal(err)
	}
	one := map[string]*opaconfig.Service{"a": svcs["a"]}
	tests := []struct {
		name     string
		raw      string
		services map[string]*opaconfig.Service
		check    func(t *testing.T, c opalog.Config, r opalog.Rules)
		wantErr  string
	}{
		{name: "defaults", raw: `{"service": "a"}`, services: svcs, check: func(t *testing.T, c opalog.Config, r opalog.Rules) {
			if c.Service != svcs["a"] || c.Resource != "/logs" || c.UploadSizeLimitBytes != 32768 || c.MinDelay != 300*time.Second ||
				c.MaxDelay != 600*time.Second || c.BufferType != "size" || c.Console != nil || r.Mask != "system/log/mask" || r.Drop != "system/log/drop" {
				t.Fatalf("%+v %+v", c, r)
			}
		}},
		{name: "the only service", raw: `{}`, services: one, check: func(t *testing.T, c opalog.Config, _ opalog.Rules) {
			if c.Service != svcs["a"] {
				t.Fatal("no service")
			}
		}},
		{name: "console only", raw: `{"console": true}`, services: svcs, check: func(t *testing.T, c opalog.Config, _ opalog.Rules) {
			if c.Service != nil || c.Console == nil {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "partition", raw: `{"service": "b", "partition_name": "p1", "resource": "/x"}`, services: svcs, check: func(t *testing.T, c opalog.Config, _ opalog.Rules) {
			if c.Resource != "/logs/p1" || c.Service != svcs["b"] {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "reporting", raw: `{"service": "a", "mask_decision": "/custom/mask", "drop_decision": "data/custom/drop", "reporting": {"buffer_type": "event", "buffer_size_limit_events": 50, "upload_size_limit_bytes": 10, "min_delay_seconds": 1, "max_delay_seconds": 2}}`, services: svcs,
			check: func(t *testing.T, c opalog.Config, r opalog.Rules) {
				if c.BufferType != "event" || c.BufferSizeLimitEvents != 50 || c.UploadSizeLimitBytes != 90 || c.MinDelay != time.Second || c.MaxDelay != 2*time.Second ||
					r.Mask != "custom/mask" || r.Drop != "custom/drop" {
					t.Fatalf("%+v %+v", c, r)
				}
			}},
		{name: "ambiguous service", raw: `{}`, services: svcs, wantErr: "decision_logs.service: name a service"},
		{name: "unknown service", raw: `{"service": "z"}`, services: svcs, wantErr: `no service named "z"`},
		{name: "plugin", raw: `{"plugin": "x"}`, services: svcs, wantErr: "decision_logs.plugin: not supported by nexus"},
		{name: "rate limit", raw: `{"service": "a", "reporting": {"max_decisions_per_second": 5}}`, services: svcs, wantErr: "decision_logs.reporting.max_decisions_per_second: not supported by nexus"},
		{name: "unknown", raw: `{"servce": "a"}`, services: svcs, wantErr: "decision_logs.servce: unknown setting"},
		{name: "manual trigger", raw: `{"service": "a", "reporting": {"trigger": "manual"}}`, services: svcs, wantErr: "not supported by nexus"},
		{name: "bytes on the event buffer", raw: `{"service": "a", "reporting": {"buffer_type": "event", "buffer_size_limit_bytes": 5}}`, services: svcs, wantErr: "buffer_size_limit_bytes: applies to the \"size\" buffer type only"},
		{name: "min without max", raw: `{"service": "a", "reporting": {"min_delay_seconds": 5}}`, services: svcs, wantErr: "min_delay_seconds needs max_delay_seconds"},
		{name: "max below min", raw: `{"service": "a", "reporting": {"min_delay_seconds": 5, "max_delay_seconds": 4}}`, services: svcs, wantErr: "min_delay_seconds <= max_delay_seconds"},
		{name: "bad buffer type", raw: `{"service": "a", "reporting": {"buffer_type": "disk"}}`, services: svcs, wantErr: `buffer_type: "disk"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, r, err := opalog.ParseDecisionLogs(json.RawMessage(tt.raw), tt.services)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c, r)
		})
	}
}

func TestParseStatus(t *testing.T) {
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"a": {"url": "http://a.example"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := opalog.ParseStatus(nil, svcs); c != nil || err != nil {
		t.Fatalf("absent: %v %v", c, err)
	}
	if c, err := opalog.ParseStatus(json.RawMessage(`{}`), svcs); err != nil || c.Service != svcs["a"] {
		t.Fatalf("the only service: %+v %v", c, err)
	}
	for raw, want := range map[string]string{
		`{"prometheus": true}`:  "status.prometheus: not supported by nexus",
		`{"plugin": "x"}`:       "status.plugin: not supported by nexus",
		`{"trigger": "manual"}`: "not supported by nexus",
		`{"service": "b"}`:      `no service named "b"`,
		`{"sevice": "a"}`:       "status.sevice: unknown setting",
	} {
		if _, err := opalog.ParseStatus(json.RawMessage(raw), svcs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", raw, err, want)
		}
	}
}
