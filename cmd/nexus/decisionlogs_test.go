package main

import (
	"bytes"
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
	statusplugin "github.com/open-policy-agent/opa/v1/plugins/status"
	"google.golang.org/grpc/codes"

	"github.com/nexuspdp/nexus/internal/version"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opastatus "github.com/nexuspdp/nexus/opacompat/status"
	"github.com/nexuspdp/nexus/pdp"
)

// TestOPALogging: the decision_logs and status sections of an OPA
// configuration start a logger and a reporter with OPA's labels; the
// reporter's first report reaches the control plane.
func TestOPALogging(t *testing.T) {
	reports := make(chan statusplugin.UpdateRequestV1, 4)
	cp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var rep statusplugin.UpdateRequestV1
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
		Bundles:      func() []opastatus.Bundle { return []opastatus.Bundle{{Name: "authz", ActiveRevision: "r1"}} },
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
	var c pdp.Config
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
	var reports []statusplugin.UpdateRequestV1
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
			var rep statusplugin.UpdateRequestV1
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

// TestRunOPACustomLogRules: decision_logs.mask_decision and drop_decision
// naming rules of the policy's own package (acme/log/mask and
// acme/log/drop) make nexus run compile those rules with the policy and
// apply them to each event, as OPA does: the mask rule erases the
// authorization header (listed in the event's erased), and a decision the
// drop rule matches sends no event. The policy's system.log rules, OPA's
// default names, are then not applied; the control run, with the default
// names configured, shows that they would be.
func TestRunOPACustomLogRules(t *testing.T) {
	const (
		token      = "Bearer tok-Xq81-secret"
		authzPtr   = "/input/attributes/request/http/headers/authorization"
		methodPtr  = "/input/attributes/request/http/method"
		acmeDrop   = "/acme-drop"
		systemDrop = "/system-drop"
	)
	policy := map[string]string{
		"policy.rego": `package envoy.authz

import input.attributes.request.http as http_request

default allow := false

allow if {
	http_request.method == "GET"
	http_request.headers.authorization == "` + token + `"
	http_request.path != "/nowhere"
}
`,
		"acme_log.rego": `package acme.log

mask contains "` + authzPtr + `"

drop if input.input.attributes.request.http.path == "` + acmeDrop + `"
`,
		"system_log.rego": `package system.log

mask contains "` + methodPtr + `"

drop if input.input.attributes.request.http.path == "` + systemDrop + `"
`,
	}
	for _, tc := range []struct {
		name  string
		rules string // the decision_logs lines naming the rules
		// dropped is the path whose decision must send no event, kept
		// the other's; erased is the event's erased list.
		dropped, kept string
		erased        string
	}{
		{name: "custom names", rules: "  mask_decision: /acme/log/mask\n  drop_decision: acme/log/drop\n", dropped: acmeDrop, kept: systemDrop, erased: authzPtr},
		{name: "default names", dropped: systemDrop, kept: acmeDrop, erased: methodPtr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var events []logs.EventV1
			var raw [][]byte
			var problems []string
			svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.URL.Path != "/logs" {
					http.NotFound(w, r)
					return
				}
				zr, err := gzip.NewReader(r.Body)
				if err != nil {
					problems = append(problems, err.Error())
					http.Error(w, err.Error(), 400)
					return
				}
				body, err := io.ReadAll(zr)
				var evs []logs.EventV1
				if err == nil {
					err = json.Unmarshal(body, &evs)
				}
				if err != nil {
					problems = append(problems, err.Error())
					http.Error(w, err.Error(), 400)
					return
				}
				raw = append(raw, body)
				events = append(events, evs...)
			}))
			defer svc.Close()
			dir := t.TempDir()
			policyDir := filepath.Join(dir, "policy")
			if err := os.MkdirAll(policyDir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, src := range policy {
				writeFile(t, policyDir, name, src)
			}
			config := writeFile(t, dir, "config.yaml", `
services:
  acme:
    url: `+svc.URL+`
decision_logs:
  service: acme
`+tc.rules+`  reporting:
    min_delay_seconds: 1
    max_delay_seconds: 1
plugins:
  envoy_ext_authz_grpc:
    addr: 127.0.0.1:0
    path: envoy/authz/allow
nexus:
  data_dir: `+filepath.Join(dir, "data")+`
`)
			p := startNexus(t, "run", "--server", "--config-file="+config, "--addr=127.0.0.1:0", policyDir)
			c := p.client(t)
			// The dropped decision goes first: events are queued, buffered
			// and uploaded in order, so once the later ones are uploaded
			// it would have been too.
			ids := map[string]string{}
			for _, path := range []string{tc.dropped, tc.kept, "/people"} {
				req := check("GET", path, "")
				req.Attributes.Request.Http.Headers["authorization"] = token
				resp, err := c.Check(context.Background(), req)
				if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
					t.Fatalf("%s: %v, %v; want allowed", path, resp, err)
				}
				ids[path] = resp.GetDynamicMetadata().GetFields()["decision_id"].GetStringValue()
				if ids[path] == "" {
					t.Fatalf("%s: no decision_id in %v", path, resp)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				mu.Lock()
				n, bad := len(events), slices.Clone(problems)
				mu.Unlock()
				if len(bad) > 0 {
					t.Fatalf("collector: %v", bad)
				}
				if n >= 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d events, want 2\n%s", n, p.log.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			evs, all := slices.Clone(events), bytes.Join(raw, nil)
			mu.Unlock()
			if len(evs) != 2 {
				t.Fatalf("%d events, want 2 (the %s decision is dropped): %+v", len(evs), tc.dropped, evs)
			}
			for i, path := range []string{tc.kept, "/people"} {
				ev := evs[i]
				if ev.DecisionID != ids[path] {
					t.Fatalf("event %d is decision %s, want %s's %s (the dropped one is %s)", i, ev.DecisionID, path, ids[path], ids[tc.dropped])
				}
				if !slices.Equal(ev.Erased, []string{tc.erased}) || len(ev.Masked) != 0 {
					t.Errorf("%s: erased %v, masked %v; want erased [%s]", path, ev.Erased, ev.Masked, tc.erased)
				}
				if ev.Input == nil {
					t.Fatalf("%s: event without input", path)
				}
				h := (*ev.Input).(map[string]any)["attributes"].(map[string]any)["request"].(map[string]any)["http"].(map[string]any)
				auth, hasAuth := h["headers"].(map[string]any)["authorization"]
				method, hasMethod := h["method"]
				if h["path"] != path {
					t.Errorf("%s: input path %v", path, h["path"])
				}
				switch tc.erased {
				case authzPtr:
					if hasAuth || method != "GET" {
						t.Errorf("%s: authorization %v (%v), method %v; want the header erased and the method kept", path, auth, hasAuth, method)
					}
				case methodPtr:
					if hasMethod || auth != token {
						t.Errorf("%s: method %v (%v), authorization %v; want the method erased and the header kept", path, method, hasMethod, auth)
					}
				}
			}
			if secretLogged := bytes.Contains(all, []byte(token)); secretLogged != (tc.erased != authzPtr) {
				t.Errorf("the token is in the uploaded bytes: %v; want %v", secretLogged, tc.erased != authzPtr)
			}
		})
	}
}
