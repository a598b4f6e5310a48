package decisionlogs_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opalog "github.com/nexuspdp/nexus/opacompat/decisionlogs"
)

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
