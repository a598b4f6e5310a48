package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"github.com/open-policy-agent/opa/v1/plugins/status"

	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/opaconfig"
	"github.com/nexuspdp/nexus/internal/opalog"
	"github.com/nexuspdp/nexus/internal/version"
)

// TestOPALogging: the decision_logs and status sections of an OPA
// configuration start a logger and a reporter with OPA's labels; the
// reporter's first report reaches the control plane.
func TestOPALogging(t *testing.T) {
	reports := make(chan status.UpdateRequestV1, 4)
	cp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var rep status.UpdateRequestV1
		if r.URL.Path == "/status/" && json.Unmarshal(body, &rep) == nil {
			reports <- rep
		}
	}))
	defer cp.Close()
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"cp": {"url": "` + cp.URL + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOPALogging(opaLogInputs{
		DecisionLogs: json.RawMessage(`{"service": "cp", "mask_decision": "/acme/log/mask", "reporting": {"min_delay_seconds": 1, "max_delay_seconds": 2}}`),
		Status:       json.RawMessage(`{"service": "cp"}`),
		Services:     svcs,
		Labels:       map[string]string{"region": "eu", "id": "mine"},
		Bundle:       "authz",
		Bundles:      func() []opalog.BundleStatus { return []opalog.BundleStatus{{Name: "authz", ActiveRevision: "r1"}} },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	if o.Logger == nil || o.Reporter == nil {
		t.Fatalf("logger %v, reporter %v", o.Logger, o.Reporter)
	}
	if !slices.Equal(o.optionalEntrypoints(), []string{"acme/log/mask", "system/log/drop"}) {
		t.Fatalf("optional entrypoints %v", o.optionalEntrypoints())
	}
	var c extauthz.Config
	o.apply(&c)
	if c.DecisionSink != o.Logger || c.MaskDecision != "acme/log/mask" || c.DropDecision != "system/log/drop" {
		t.Fatalf("config %+v", c)
	}
	select {
	case rep := <-reports:
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(rep.Labels["id"]) ||
			rep.Labels["version"] != version.Get().Version || rep.Labels["region"] != "eu" {
			t.Fatalf("labels %v", rep.Labels)
		}
		if rep.Bundles["authz"].ActiveRevision != "r1" || rep.DecisionLogs == nil {
			t.Fatalf("report %+v", rep)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no status report")
	}
}

func TestOPALoggingErrors(t *testing.T) {
	for _, tt := range []struct{ dl, st, want string }{
		{dl: `{"plugin": "p"}`, want: "decision_logs.plugin: not supported by nexus"},
		{st: `{"prometheus": true}`, want: "status.prometheus: not supported by nexus"},
		{dl: `{"service": "nope"}`, want: `no service named "nope"`},
	} {
		_, err := newOPALogging(opaLogInputs{DecisionLogs: json.RawMessage(tt.dl), Status: json.RawMessage(tt.st)})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s: err %v, want %q", tt.dl, tt.st, err, tt.want)
		}
	}
	// Nowhere to write to: nothing to do, as in OPA.
	o, err := newOPALogging(opaLogInputs{DecisionLogs: json.RawMessage(`{}`), Status: json.RawMessage(`{}`)})
	if err != nil || o.Logger != nil || o.Reporter != nil {
		t.Fatalf("%+v %v", o, err)
	}
}

// TestLoadPolicyCompilesLogRules: a policy directory that defines the
// default mask rule is compiled with it as an entrypoint.
func TestLoadPolicyCompilesLogRules(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"authz.rego": "package nexus.authz\n\ndecision := {\"allow\": true}\n",
		"mask.rego":  "package system.log\n\nmask contains \"/input/secret\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := loadPolicy(context.Background(), serveConfig{Policy: dir, Entrypoints: []string{"nexus/authz/decision"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Manifest.Entrypoints, []string{"nexus/authz/decision", "system/log/mask"}) {
		t.Fatalf("entrypoints %v", b.Manifest.Entrypoints)
	}
}

// TestRunOPADecisionLogs: nexus run with an OPA configuration whose
// decision_logs and status name a service uploads each decision, in
// OPA's format and masked by the policy's mask rule, and reports its
// status there; both are read with OPA's own types. The policy is a
// directory, no bundle, so the events name no bundle.
func TestRunOPADecisionLogs(t *testing.T) {
	var mu sync.Mutex
	var events []logs.EventV1
	var reports []status.UpdateRequestV1
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/logs":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			var evs []logs.EventV1
			if err := json.NewDecoder(zr).Decode(&evs); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			events = append(events, evs...)
		case "/status/":
			var rep status.UpdateRequestV1
			if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			reports = append(reports, rep)
		default:
			http.NotFound(w, r)
		}
	}))
	defer svc.Close()
	dir := t.TempDir()
	policyDir := filepath.Join(dir, "policy")
	if err := os.MkdirAll(policyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, policyDir, "policy.rego", quickStartPolicy)
	writeFile(t, policyDir, "mask.rego", "package system.log\n\nmask contains \"/input/attributes/request/http/method\"\n")
	config := writeFile(t, dir, "config.yaml", `
services:
  acme:
    url: `+svc.URL+`
labels:
  region: eu
decision_logs:
  service: acme
  reporting:
    min_delay_seconds: 1
    max_delay_seconds: 1
status:
  service: acme
plugins:
  envoy_ext_authz_grpc:
    addr: 127.0.0.1:0
    path: envoy/authz/allow
nexus:
  data_dir: `+filepath.Join(dir, "data")+`
`)
	p := startNexus(t, "run", "--server", "--config-file="+config, "--addr=127.0.0.1:0", policyDir)
	resp, err := p.client(t).Check(context.Background(), check("GET", "/people", ""))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetDynamicMetadata().GetFields()["decision_id"].GetStringValue()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n, nr := len(events), len(reports)
		var ev logs.EventV1
		if n > 0 {
			ev = events[0]
		}
		mu.Unlock()
		if n > 0 && nr > 0 {
			if ev.DecisionID != id || ev.Path != "envoy/authz/allow" || len(ev.Bundles) != 0 || ev.Labels["region"] != "eu" || ev.Labels["id"] == "" ||
				!slices.Equal(ev.Erased, []string{"/input/attributes/request/http/method"}) || ev.Result == nil || *ev.Result != true {
				t.Fatalf("event %+v (decision %s)", ev, id)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events, %d status reports\n%s", n, nr, p.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
