package status_test

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
	statusplugin "github.com/open-policy-agent/opa/v1/plugins/status"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opalog "github.com/nexuspdp/nexus/opacompat/decisionlogs"
	"github.com/nexuspdp/nexus/opacompat/status"
	"github.com/nexuspdp/nexus/pdp"

	"github.com/nexuspdp/nexus/internal/fixture"
)

// statusService is a control plane: it decodes every report with OPA's
// own status type.
type statusService struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reports []statusplugin.UpdateRequestV1
	paths   []string
	errs    []string
}

func newStatusService(t *testing.T) *statusService {
	t.Helper()
	s := &statusService{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var rep statusplugin.UpdateRequestV1
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

func (s *statusService) wait(t *testing.T, n int) ([]statusplugin.UpdateRequestV1, []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s.mu.Lock()
		reps, paths, errs := append([]statusplugin.UpdateRequestV1(nil), s.reports...), append([]string(nil), s.paths...), s.errs
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
	cfg, err := status.ParseConfig(json.RawMessage(`{"service": "cp", "partition_name": "edge"}`), svcs)
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
	cfg.Bundles = func() []status.Bundle {
		return []status.Bundle{{Name: "authz", ActiveRevision: rev.Load().(string), LastSuccessfulActivation: activated,
			LastSuccessfulDownload: activated, LastSuccessfulRequest: activated, LastRequest: activated, HTTPCode: 200}}
	}
	r := status.New(*cfg)
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
	out := &fixture.SyncBuffer{}
	r := status.New(status.Config{Labels: map[string]string{"id": "p"}, Console: out, Interval: time.Hour})
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
	var rep statusplugin.UpdateRequestV1
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

func TestParseConfig(t *testing.T) {
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"a": {"url": "http://a.example"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := status.ParseConfig(nil, svcs); c != nil || err != nil {
		t.Fatalf("absent: %v %v", c, err)
	}
	if c, err := status.ParseConfig(json.RawMessage(`{}`), svcs); err != nil || c.Service != svcs["a"] {
		t.Fatalf("the only service: %+v %v", c, err)
	}
	for raw, want := range map[string]string{
		`{"prometheus": true}`:  "status.prometheus: not supported by nexus",
		`{"plugin": "x"}`:       "status.plugin: not supported by nexus",
		`{"trigger": "manual"}`: "not supported by nexus",
		`{"service": "b"}`:      `no service named "b"`,
		`{"sevice": "a"}`:       "status.sevice: unknown setting",
	} {
		if _, err := status.ParseConfig(json.RawMessage(raw), svcs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", raw, err, want)
		}
	}
}
