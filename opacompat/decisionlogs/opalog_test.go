package decisionlogs_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/open-policy-agent/opa/v1/plugins/logs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nexuspdp/nexus/compiler"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/extauthz"
	"github.com/nexuspdp/nexus/internal/fixture"
	opaconfig "github.com/nexuspdp/nexus/opacompat/config"
	opalog "github.com/nexuspdp/nexus/opacompat/decisionlogs"
	"github.com/nexuspdp/nexus/pdp"
)

const (
	envoyPath = "envoy/authz/allow"
	appPath   = "app/decision"
	secret    = "s3cr3t-t0ken-Zq9"
	apiKey    = "k-live-7731"
)

// seeingPolicy returns, in its result, the whole input it saw: the
// logged input must equal it.
const seeingPolicy = `package envoy.authz

allow := {"allowed": ok, "headers": {"x-user": "alice"}, "seen": input}

default ok := false

ok if input.attributes.request.http.headers.authorization == "Bearer ` + secret + `"
`

// headerPolicy reads the headers (so that the input keeps them) and
// the path.
const headerPolicy = `package envoy.authz

headers := input.attributes.request.http.headers

default allow := false

allow if headers.authorization == "Bearer ` + secret + `"

allow if {
	headers["x-api-key"] == "` + apiKey + `"
	input.attributes.request.http.path != "/nowhere"
}
`

const appPolicy = `package app

decision := {"allow": input.subject.id == "alice", "reason": "demo"}
`

const maskPolicy = `package system.log

mask contains "/input/attributes/request/http/headers/authorization"

mask contains {"op": "upsert", "path": "/input/attributes/request/http/headers/x-api-key", "value": "***"} if {
	input.input.attributes.request.http.headers["x-api-key"]
}

drop if input.input.attributes.request.http.path == "/healthz"
`

// collector is a log service: it gunzips every batch, keeps its bytes and
// decodes it with OPA's own event type. While failing > 0 it answers 503
// and counts down; while hold is open it blocks.
type collector struct {
	srv     *httptest.Server
	mu      sync.Mutex
	raw     [][]byte
	zsizes  []int   // each batch's gzip-compressed size
	batches [][]int // each batch's events, as indexes into events
	events  []logs.EventV1
	failing atomic.Int32
	failed  atomic.Int32
	hold    chan struct{}
	errs    []string
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.hold != nil {
			select {
			case <-c.hold:
			case <-r.Context().Done():
				return
			}
		}
		if c.failing.Load() > 0 {
			c.failing.Add(-1)
			c.failed.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		problem := func(f string, a ...any) {
			c.mu.Lock()
			c.errs = append(c.errs, fmt.Sprintf(f, a...))
			c.mu.Unlock()
			http.Error(w, "bad batch", http.StatusBadRequest)
		}
		if r.Method != http.MethodPost || r.URL.Path != "/logs" || r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Content-Type") != "application/json" {
			problem("%s %s, encoding %q, type %q", r.Method, r.URL.Path, r.Header.Get("Content-Encoding"), r.Header.Get("Content-Type"))
			return
		}
		zbody, err := io.ReadAll(r.Body)
		if err != nil {
			problem("reading: %v", err)
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(zbody))
		if err != nil {
			problem("gzip: %v", err)
			return
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			problem("gunzip: %v", err)
			return
		}
		var evs []logs.EventV1
		if err := json.Unmarshal(body, &evs); err != nil {
			problem("decoding %s into OPA's EventV1: %v", body, err)
			return
		}
		c.mu.Lock()
		c.raw = append(c.raw, body)
		c.zsizes = append(c.zsizes, len(zbody))
		batch := make([]int, len(evs))
		for i := range evs {
			batch[i] = len(c.events) + i
		}
		c.batches = append(c.batches, batch)
		c.events = append(c.events, evs...)
		c.mu.Unlock()
	}))
	t.Cleanup(func() {
		if c.hold != nil {
			select {
			case <-c.hold:
			default:
				close(c.hold)
			}
		}
		c.srv.Close()
	})
	return c
}

func (c *collector) service(t *testing.T) *opaconfig.Service {
	t.Helper()
	svcs, err := opaconfig.ParseServices(json.RawMessage(`{"collector": {"url": "` + c.srv.URL + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return svcs["collector"]
}

func (c *collector) snapshot() ([]logs.EventV1, [][]byte, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events), slices.Clone(c.raw), slices.Clone(c.errs)
}

// waitEvents waits until the collector holds n events (the uploader runs
// on its own schedule) or fails the test after a generous deadline.
func (c *collector) waitEvents(t *testing.T, n int) []logs.EventV1 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, _, errs := c.snapshot()
		if len(errs) > 0 {
			t.Fatalf("collector: %v", errs)
		}
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector holds %d events, want %d", len(evs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stack is a real server: the policy compiled by nexus' compiler, run
// under wazero, behind real gRPC and HTTP listeners, logging through a
// real Logger.
type stack struct {
	srv  *extauthz.Server
	pdp  *pdp.PDP
	grpc authv3.AuthorizationClient
	http string
	log  *opalog.Logger
	eng  *engine.Engine
}

func newStack(t *testing.T, modules map[string]string, cfg opalog.Config) *stack {
	t.Helper()
	ctx := context.Background()
	b, err := compiler.Compile(ctx, compiler.Options{
		Modules:             modules,
		Entrypoints:         []string{envoyPath, appPath},
		OptionalEntrypoints: []string{pdp.DefaultMaskDecision, pdp.DefaultDropDecision},
		Revision:            "rev-42",
	})
	if err != nil {
		t.Fatal(err)
	}
	store := fixture.DemoStore(t)
	eng := fixture.StoreEngine(t, store)
	lg, err := opalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pdp.New(ctx, pdp.Config{
		Engine: eng, Store: store, Relations: store, Policy: b,
		EnvoyEntrypoint: envoyPath, AuthzEntrypoint: appPath,
		EvalTimeout:  5 * time.Second,
		DecisionSink: lg,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := extauthz.New(extauthz.Config{
		PDP: p, Store: store,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", AdminAddr: "-",
		AppAPIInsecure: true,
	})
	if err != nil {
		_ = p.Close(ctx)
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.Addr("grpc").String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{srv: srv, pdp: p, grpc: authv3.NewAuthorizationClient(conn), http: "http://" + srv.Addr("http").String(), log: lg, eng: eng}
	t.Cleanup(func() {
		_ = conn.Close()
		s.close(t)
	})
	return s
}

// close shuts the server down, then flushes the log; it may be called
// more than once.
func (s *stack) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := s.pdp.Close(ctx); err != nil {
		t.Errorf("closing the decision core: %v", err)
	}
	if err := s.log.Close(ctx); err != nil {
		t.Errorf("closing the log: %v", err)
	}
}

// check sends an Envoy CheckRequest and returns whether it was allowed
// and the decision_id of the response's dynamic metadata.
func (s *stack) check(t *testing.T, path string, headers map[string]string) (bool, string) {
	t.Helper()
	resp, err := s.grpc.Check(context.Background(), fixture.EnvoyRequest("GET", path, headers))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetDynamicMetadata().GetFields()["decision_id"].GetStringValue()
	if id == "" {
		t.Fatalf("no decision_id in the response's dynamic metadata: %v", resp)
	}
	return resp.GetStatus().GetCode() == 0, id
}

func fastUpload(c *collector, t *testing.T) opalog.Config {
	return opalog.Config{
		Labels:   map[string]string{"id": "proc-1", "version": "test", "region": "eu"},
		Bundle:   "nexus",
		Service:  c.service(t),
		MinDelay: 5 * time.Millisecond, MaxDelay: 10 * time.Millisecond,
	}
}

func jsonValue(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return jsonValue(t, raw)
}

// TestUploadOPAEvents: every decision of the Envoy, forward-auth and
// AuthZEN paths reaches the collector as an event OPA's EventV1 decodes,
// with the decision ID Envoy got, the whole input document, the policy's
// raw result, the path, labels, bundle revision, timestamp and timers.
func TestUploadOPAEvents(t *testing.T) {
	c := newCollector(t)
	s := newStack(t, map[string]string{"envoy.rego": seeingPolicy, "app.rego": appPolicy}, fastUpload(c, t))
	start := time.Now()

	allowed, idAllow := s.check(t, "/files/a?x=1", map[string]string{"authorization": "Bearer " + secret})
	denied, idDeny := s.check(t, "/files/b", map[string]string{"authorization": "Bearer wrong"})
	if !allowed || denied {
		t.Fatalf("allowed %v, denied %v", allowed, !denied)
	}
	resp, err := http.Get(s.http + "/ext_authz/files/c")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPost, s.http+"/access/v1/evaluation",
		strings.NewReader(`{"subject":{"type":"user","id":"alice"},"action":{"name":"read"},"resource":{"type":"file","id":"f1"}}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("authzen: %d", resp.StatusCode)
	}

	evs := c.waitEvents(t, 4)
	end := time.Now()
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4", len(evs))
	}
	byID := map[string]logs.EventV1{}
	for _, ev := range evs {
		byID[ev.DecisionID] = ev
	}
	for _, id := range []string{idAllow, idDeny} {
		if _, ok := byID[id]; !ok {
			t.Fatalf("no event for decision %s (events %v)", id, byID)
		}
	}
	paths := map[string]int{}
	for _, ev := range evs {
		paths[ev.Path]++
		if !reflect.DeepEqual(ev.Labels, map[string]string{"id": "proc-1", "version": "test", "region": "eu"}) {
			t.Errorf("labels %v", ev.Labels)
		}
		if !reflect.DeepEqual(ev.Bundles, map[string]logs.BundleInfoV1{"nexus": {Revision: "rev-42"}}) {
			t.Errorf("bundles %v", ev.Bundles)
		}
		if ev.Timestamp.Before(start.Add(-time.Second)) || ev.Timestamp.After(end) || ev.Timestamp.Location() != time.UTC {
			t.Errorf("timestamp %v not within %v..%v in UTC", ev.Timestamp, start, end)
		}
		eval, _ := ev.Metrics["timer_rego_query_eval_ns"].(float64)
		handler, _ := ev.Metrics["timer_server_handler_ns"].(float64)
		if eval <= 0 || handler < eval {
			t.Errorf("metrics %v", ev.Metrics)
		}
		if ev.Input == nil || ev.Result == nil {
			t.Fatalf("event without input or result: %+v", ev)
		}
		// The result is the policy's raw document: evaluating the bundle
		// again on the logged input gives it back.
		in, err := json.Marshal(*ev.Input)
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.eng.Eval(context.Background(), ev.Path, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := roundTrip(t, *ev.Result), jsonValue(t, out); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: result %v, the policy says %v", ev.DecisionID, got, want)
		}
		if ev.Path == envoyPath {
			// The policy put the input it saw into its result.
			seen := (*ev.Result).(map[string]any)["seen"]
			if !reflect.DeepEqual(roundTrip(t, *ev.Input), roundTrip(t, seen)) {
				t.Errorf("%s: logged input %v, the policy saw %v", ev.DecisionID, *ev.Input, seen)
			}
		}
	}
	if paths[envoyPath] != 3 || paths[appPath] != 1 {
		t.Fatalf("paths %v", paths)
	}
	allow := byID[idAllow]
	if r := (*allow.Result).(map[string]any); r["allowed"] != true || r["headers"].(map[string]any)["x-user"] != "alice" {
		t.Errorf("allowed event's result %v", r)
	}
	in := (*allow.Input).(map[string]any)["attributes"].(map[string]any)["request"].(map[string]any)["http"].(map[string]any)
	if in["path"] != "/files/a?x=1" {
		t.Errorf("input path %v", in["path"])
	}
}

// TestMaskErasesSecret: the policy's mask rule erases the authorization
// header and upserts the API key; neither secret appears anywhere in the
// uploaded bytes, and the event lists what was erased and masked. The
// same requests without the mask rule carry both secrets, so the search
// can find them.
func TestMaskErasesSecret(t *testing.T) {
	headers := map[string]string{"authorization": "Bearer " + secret, "x-api-key": apiKey}
	t.Run("masked", func(t *testing.T) {
		c := newCollector(t)
		s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy, "mask.rego": maskPolicy}, fastUpload(c, t))
		if ok, _ := s.check(t, "/files/a", headers); !ok {
			t.Fatal("denied")
		}
		_, id := s.check(t, "/files/b", headers)
		s.close(t)
		evs, raw, _ := c.snapshot()
		if len(evs) != 2 {
			t.Fatalf("%d events", len(evs))
		}
		all := bytes.Join(raw, nil)
		for _, s := range []string{secret, apiKey} {
			if bytes.Contains(all, []byte(s)) {
				t.Fatalf("%q is in the uploaded events: %s", s, all)
			}
		}
		ev := evs[slices.IndexFunc(evs, func(e logs.EventV1) bool { return e.DecisionID == id })]
		if !slices.Equal(ev.Erased, []string{"/input/attributes/request/http/headers/authorization"}) ||
			!slices.Equal(ev.Masked, []string{"/input/attributes/request/http/headers/x-api-key"}) {
			t.Fatalf("erased %v, masked %v", ev.Erased, ev.Masked)
		}
		h := (*ev.Input).(map[string]any)["attributes"].(map[string]any)["request"].(map[string]any)["http"].(map[string]any)["headers"].(map[string]any)
		if _, ok := h["authorization"]; ok || h["x-api-key"] != "***" {
			t.Fatalf("headers %v", h)
		}
	})
	t.Run("unmasked control", func(t *testing.T) {
		c := newCollector(t)
		s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy}, fastUpload(c, t))
		s.check(t, "/files/a", headers)
		s.close(t)
		_, raw, _ := c.snapshot()
		all := bytes.Join(raw, nil)
		if !bytes.Contains(all, []byte(secret)) || !bytes.Contains(all, []byte(apiKey)) {
			t.Fatalf("the unmasked event lacks the secrets: %s", all)
		}
	})
}

// TestDropRule: the policy's drop rule keeps /healthz decisions out of
// the log; the decisions themselves are made.
func TestDropRule(t *testing.T) {
	c := newCollector(t)
	s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy, "mask.rego": maskPolicy}, fastUpload(c, t))
	ok, _ := s.check(t, "/healthz", map[string]string{"x-api-key": apiKey})
	_, kept := s.check(t, "/files/a", nil)
	if !ok {
		t.Fatal("the dropped decision was not made")
	}
	s.close(t)
	evs, _, _ := c.snapshot()
	if len(evs) != 1 || evs[0].DecisionID != kept {
		t.Fatalf("events %+v, want only %s", evs, kept)
	}
}

// TestMalformedMaskFailsClosed: a mask rule whose result is not a list of
// pointers drops the event (counted) instead of logging it unmasked.
func TestMalformedMaskFailsClosed(t *testing.T) {
	for name, mask := range map[string]string{
		"object":        "package system.log\n\nmask := {\"path\": \"/input\"}\n",
		"outside":       "package system.log\n\nmask contains \"/labels/id\"\n",
		"unknown op":    "package system.log\n\nmask contains {\"op\": \"hide\", \"path\": \"/input/attributes\"}\n",
		"not a pointer": "package system.log\n\nmask contains 7\n",
		"mask conflict": "package system.log\n\nmask := [\"/input\"] if input.decision_id\n\nmask := [\"/result\"] if input.path\n",
		"drop conflict": "package system.log\n\ndrop := true if input.decision_id\n\ndrop := false if input.path\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := newCollector(t)
			s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy, "mask.rego": mask}, fastUpload(c, t))
			if ok, _ := s.check(t, "/files/a", map[string]string{"authorization": "Bearer " + secret}); !ok {
				t.Fatal("the decision was not made")
			}
			s.close(t)
			_, raw, _ := c.snapshot()
			if all := bytes.Join(raw, nil); bytes.Contains(all, []byte(secret)) || len(raw) != 0 {
				t.Fatalf("uploaded %s", all)
			}
			if s.log.DroppedByRules() != 1 {
				t.Fatalf("dropped by rules %d, want 1", s.log.DroppedByRules())
			}
			if s.log.Metrics()["counter_decision_logs_dropped_rule_error"] != uint64(1) {
				t.Fatalf("metrics %v", s.log.Metrics())
			}
		})
	}
}

// TestBufferFullDropsOldest: with the uploader not due before shutdown,
// an event buffer of 3 keeps the 3 newest events and counts the rest as
// dropped, under OPA's counter name; every decision is made.
func TestBufferFullDropsOldest(t *testing.T) {
	c := newCollector(t)
	cfg := fastUpload(c, t)
	cfg.MinDelay, cfg.MaxDelay = time.Hour, time.Hour
	cfg.BufferType, cfg.BufferSizeLimitEvents = opalog.BufferEvent, 3
	s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy}, cfg)
	var ids []string
	for i := range 10 {
		ok, id := s.check(t, fmt.Sprintf("/files/%d", i), map[string]string{"x-api-key": apiKey})
		if !ok {
			t.Fatalf("decision %d denied", i)
		}
		ids = append(ids, id)
	}
	s.close(t)
	evs, _, _ := c.snapshot()
	var got []string
	for _, ev := range evs {
		got = append(got, ev.DecisionID)
	}
	if !slices.Equal(got, ids[7:]) {
		t.Fatalf("uploaded %v, want the newest %v", got, ids[7:])
	}
	if s.log.Dropped() != 7 || s.log.Metrics()["counter_decision_logs_dropped_buffer_size_limit_exceeded"] != uint64(7) {
		t.Fatalf("dropped %d, metrics %v", s.log.Dropped(), s.log.Metrics())
	}
}

// TestSlowCollectorDoesNotBlockDecisions: a collector that never answers
// holds the uploader; decisions go on and the small size buffer drops
// what does not fit.
func TestSlowCollectorDoesNotBlockDecisions(t *testing.T) {
	c := newCollector(t)
	c.hold = make(chan struct{})
	cfg := fastUpload(c, t)
	cfg.BufferSizeLimitBytes = 4 << 10
	s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy}, cfg)
	for i := range 200 {
		if ok, _ := s.check(t, fmt.Sprintf("/files/%d", i), map[string]string{"x-api-key": apiKey}); !ok {
			t.Fatalf("decision %d denied", i)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.log.Dropped() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing dropped with a 4 KiB buffer and a collector that never answers")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if m := s.log.Metrics()["counter_decision_logs_dropped_buffer_size_limit_bytes_exceeded"]; m == uint64(0) {
		t.Fatalf("metrics %v", s.log.Metrics())
	}
	close(c.hold)
}

// TestCollectorDownThenUp: batches refused with 503 stay buffered and are
// sent again with back-off; every event arrives exactly once.
func TestCollectorDownThenUp(t *testing.T) {
	c := newCollector(t)
	c.failing.Store(4)
	cfg := fastUpload(c, t)
	var notified atomic.Int32
	cfg.OnStatus = func() { notified.Add(1) }
	s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy}, cfg)
	var ids []string
	for i := range 6 {
		_, id := s.check(t, fmt.Sprintf("/files/%d", i), nil)
		ids = append(ids, id)
	}
	c.waitEvents(t, 6)
	for i := range 4 {
		_, id := s.check(t, fmt.Sprintf("/more/%d", i), nil)
		ids = append(ids, id)
	}
	c.waitEvents(t, 10)
	s.close(t)
	evs, _, _ := c.snapshot()
	var got []string
	for _, ev := range evs {
		got = append(got, ev.DecisionID)
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("delivered %v, want each of %v once", got, ids)
	}
	if c.failed.Load() != 4 {
		t.Fatalf("%d refused uploads, want 4", c.failed.Load())
	}
	if st := s.log.Status(); st != (opalog.UploadStatus{}) || notified.Load() < 2 {
		t.Fatalf("status %+v after recovery, %d notifications", st, notified.Load())
	}
	if m := s.log.Metrics(); m["counter_decision_logs_chunks_upload_failed"] != uint64(4) {
		t.Fatalf("metrics %v", m)
	}
}

// TestUploadSizeLimit: with upload_size_limit_bytes set, the buffered
// events go up in several POSTs whose gzip-compressed bodies are each no
// larger than the limit, and each event is delivered exactly once, in
// order, also when the collector refuses some POSTs. An event larger than
// the limit on its own, compressed, is dropped and counted under OPA's
// counters (enc_log_exceeded_upload_size_limit_bytes and
// decision_logs_encoding_failure, as OPA's chunk encoder counts an event
// it cannot fit and has no ND builtin cache to shed).
func TestUploadSizeLimit(t *testing.T) {
	const (
		limit = 2048
		n     = 40
		big   = 17 // the request whose event cannot fit
	)
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		failing int32 // POSTs the collector refuses first
	}{
		{name: "flushed at shutdown", delay: time.Hour},
		{name: "periodic with refusals", delay: 5 * time.Millisecond, failing: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCollector(t)
			c.failing.Store(tc.failing)
			cfg := fastUpload(c, t)
			cfg.MinDelay, cfg.MaxDelay = tc.delay, 2*tc.delay
			cfg.UploadSizeLimitBytes = limit
			s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy}, cfg)
			// Random bytes, base64-encoded, compress to about three
			// quarters of their length: a few events fit in one batch.
			rng := rand.New(rand.NewPCG(1, 2))
			noise := func(size int) string {
				b := make([]byte, size)
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				return base64.StdEncoding.EncodeToString(b)
			}
			var want []string
			var bigID, bigNoise string
			for i := range n {
				h := map[string]string{"x-api-key": apiKey, "x-noise": noise(300)}
				if i == big {
					bigNoise = noise(2 * limit)
					h["x-noise"] = bigNoise
				}
				ok, id := s.check(t, fmt.Sprintf("/files/%d", i), h)
				if !ok {
					t.Fatalf("decision %d denied", i)
				}
				if i == big {
					bigID = id
				} else {
					want = append(want, id)
				}
			}
			s.close(t)

			evs, raw, errs := c.snapshot()
			c.mu.Lock()
			zsizes, batches := slices.Clone(c.zsizes), slices.Clone(c.batches)
			c.mu.Unlock()
			if len(errs) > 0 {
				t.Fatalf("collector: %v", errs)
			}
			var got []string
			for _, ev := range evs {
				got = append(got, ev.DecisionID)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("delivered %d events %v,\nwant each of these %d once, in order (without %s): %v", len(got), got, len(want), bigID, want)
			}
			if bytes.Contains(bytes.Join(raw, nil), []byte(bigNoise)) {
				t.Fatal("the event larger than the limit was uploaded")
			}
			if len(zsizes) < 3 {
				t.Fatalf("%d POSTs (%v bytes); want the events split into several", len(zsizes), zsizes)
			}
			several := false
			for i, z := range zsizes {
				if z > limit {
					t.Errorf("POST %d: %d bytes gzip-compressed, over the limit of %d", i, z, limit)
				}
				several = several || len(batches[i]) > 1
			}
			if !several {
				t.Errorf("every POST holds one event (%v bytes): the limit leaves room for more", zsizes)
			}
			if int32(c.failed.Load()) != tc.failing {
				t.Errorf("%d POSTs refused, want %d", c.failed.Load(), tc.failing)
			}
			m := s.log.Metrics()
			counter := func(name string) uint64 {
				v, _ := m["counter_"+name].(uint64) // a counter still at zero is left out
				return v
			}
			if counter("enc_log_exceeded_upload_size_limit_bytes") != 1 || counter("decision_logs_encoding_failure") != 1 ||
				counter("decision_logs_chunks_uploaded") != uint64(len(zsizes)) || counter("decision_logs_chunks_upload_failed") != uint64(tc.failing) {
				t.Errorf("metrics %v; want one event over the limit and %d chunks uploaded", m, len(zsizes))
			}
		})
	}
}

// TestConsole: console events are one JSON line each, with OPA's
// console fields, and OPA's EventV1 reads them.
func TestConsole(t *testing.T) {
	out := &fixture.SyncBuffer{}
	s := newStack(t, map[string]string{"envoy.rego": headerPolicy, "app.rego": appPolicy, "mask.rego": maskPolicy}, opalog.Config{
		Labels: map[string]string{"id": "p", "version": "v"}, Bundle: "nexus", Console: out,
	})
	_, id := s.check(t, "/files/a", map[string]string{"authorization": "Bearer " + secret})
	s.close(t)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("console: %q", out.String())
	}
	var ev logs.EventV1
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &fields); err != nil {
		t.Fatal(err)
	}
	if ev.DecisionID != id || ev.Path != envoyPath || ev.Labels["id"] != "p" || fields["level"] != "info" ||
		fields["msg"] != "Decision Log" || fields["type"] != "openpolicyagent.org/decision_logs" {
		t.Fatalf("console line %s", lines[0])
	}
	if _, err := time.Parse(time.RFC3339, fields["time"].(string)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(lines[0], secret) || !slices.Equal(ev.Erased, []string{"/input/attributes/request/http/headers/authorization"}) {
		t.Fatalf("console line not masked: %s", lines[0])
	}
}
