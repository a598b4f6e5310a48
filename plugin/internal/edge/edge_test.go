package edge

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/plugin/internal/proxywasm"
)

const cfgJSON = `{
  "pdp_cluster": "nexus_admin",
  "refresh_period_ms": 1000,
  "max_age_ms": 5000,
  "subject": {"header": "x-user-id"},
  "routes": [
    {"method": "GET", "path": "/t/{tenant}/files/*", "action": "read", "resource_type": "file"},
    {"method": "DELETE", "path": "/t/{tenant}/files/*", "action": "delete", "resource_type": "file"}
  ]
}`

func snapshotFixture() *api.EdgeSnapshot {
	return &api.EdgeSnapshot{
		Version:       1,
		Revision:      7,
		GeneratedAt:   time.Unix(1_700_000_000, 0).UTC(),
		ResourceTypes: map[string]string{"file": api.ModeRBAC, "doc": api.ModeReBAC},
		Roles:         map[string][]string{"admin": {"file:*"}, "viewer": {"file:read"}, "root": {"*:*"}, "auditor": {"*:read"}},
		Assignments: map[string]map[string][]string{
			"alice": {"acme": {"admin"}},
			"bob":   {"acme": {"viewer"}},
			"rita":  {"acme": {"root"}},
			"otto":  {"acme": {"auditor"}},
		},
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		wantErr string
	}{
		{"valid", cfgJSON, ""},
		{"jwt subject", `{"pdp_cluster":"c","subject":{"jwt_header":"x-jwt-payload"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, ""},
		{"both subjects", `{"pdp_cluster":"c","subject":{"header":"a","jwt_header":"b"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, "not both"},
		{"claim without jwt", `{"pdp_cluster":"c","subject":{"header":"a","claim":"sub"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, "claim needs jwt_header"},
		{"upper-case header", `{"pdp_cluster":"c","subject":{"header":"X-User"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, "lower-case"},
		{"no tenant source", `{"pdp_cluster":"c","subject":{"header":"x"},"routes":[{"path":"/files/*","action":"a","resource_type":"r"}]}`, "no {tenant} segment"},
		{"refresh too fast", `{"pdp_cluster":"c","refresh_period_ms":10,"subject":{"header":"x"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, "below 100"},
		{"max age below refresh", `{"pdp_cluster":"c","refresh_period_ms":1000,"max_age_ms":500,"subject":{"header":"x"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, "below refresh_period_ms"},
		{"bad on_no_snapshot", `{"pdp_cluster":"c","on_no_snapshot":"allow","subject":{"header":"x"},"routes":[{"path":"/{tenant}","action":"a","resource_type":"r"}]}`, "on_no_snapshot"},
		{"route without action", `{"pdp_cluster":"c","subject":{"header":"x"},"routes":[{"path":"/{tenant}","resource_type":"r"}]}`, "action and resource_type"},
		{"two tenants", `{"pdp_cluster":"c","subject":{"header":"x"},"routes":[{"path":"/{tenant}/{tenant}","action":"a","resource_type":"r"}]}`, "at most one {tenant}"},
		{"relative path", `{"pdp_cluster":"c","subject":{"header":"x"},"routes":[{"path":"{tenant}","action":"a","resource_type":"r"}]}`, "must start with /"},
		{"trailing data", cfgJSON + `{}`, "trailing data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.cfg))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.SnapshotPath != "/v1/edge/snapshot" || c.OnNoSnapshot != OnNoSnapshotContinue || c.CallTimeoutMS == 0 {
					t.Fatalf("defaults not filled: %+v", c)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want ErrBadConfig containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestPattern(t *testing.T) {
	tests := []struct {
		name, pattern, path string
		ok                  bool
		tenant              string
	}{
		{"literal", "/a/b", "/a/b", true, ""},
		{"literal trailing slash", "/a/b", "/a/b/", true, ""},
		{"literal mismatch", "/a/b", "/a/c", false, ""},
		{"too long", "/a/b", "/a/b/c", false, ""},
		{"too short", "/a/b", "/a", false, ""},
		{"star", "/a/*", "/a/x", true, ""},
		{"star needs a segment", "/a/*", "/a", false, ""},
		{"tenant", "/t/{tenant}/x", "/t/acme/x", true, "acme"},
		{"rest", "/d/**", "/d/1/2/3", true, ""},
		{"rest empty", "/d/**", "/d", true, ""},
		{"root", "/", "/", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compilePattern(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			tenant, ok := p.match(tc.path)
			if ok != tc.ok || tenant != tc.tenant {
				t.Fatalf("match(%q) = %q, %v; want %q, %v", tc.path, tenant, ok, tc.tenant, tc.ok)
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	tests := []struct {
		name, in, out string
		ok            bool
	}{
		{"plain", "/a/b", "/a/b", true},
		{"query", "/a/b?c=../d", "/a/b", true},
		{"fragment", "/a#x", "/a", true},
		{"dot", "/a/./b", "", false},
		{"dot-dot", "/a/../b", "", false},
		{"percent", "/a/%2e%2e/b", "", false},
		{"backslash", "/a\\..\\b", "", false},
		{"relative", "a/b", "", false},
		{"empty", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := cleanPath(tc.in)
			if out != tc.out || ok != tc.ok {
				t.Fatalf("cleanPath(%q) = %q, %v; want %q, %v", tc.in, out, ok, tc.out, tc.ok)
			}
		})
	}
}

func jwtPayload(claims map[string]any) string {
	b, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestClaimFromPayload(t *testing.T) {
	payload := jwtPayload(map[string]any{"sub": "alice", "uid": 42, "email": "a@example.com"})
	tests := []struct {
		name, header, claim, want string
		ok                        bool
	}{
		{"payload only", payload, "sub", "alice", true},
		{"padded payload", payload + "==", "sub", "alice", true},
		{"whole jwt", "eyJhbGciOiJub25lIn0." + payload + ".sig", "sub", "alice", true},
		{"other claim", payload, "email", "a@example.com", true},
		{"missing claim", payload, "tenant", "", false},
		{"non-string claim", payload, "uid", "", false},
		{"two segments", "a." + payload, "sub", "", false},
		{"not base64", "!!!", "sub", "", false},
		{"not json", base64.RawURLEncoding.EncodeToString([]byte("nope")), "sub", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := claimFromPayload(tc.header, tc.claim)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("claimFromPayload = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSnapshotDecide(t *testing.T) {
	s, err := CompileSnapshot(snapshotFixture())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, subject, tenant, typ, action string
		want                               Outcome
		reason                             string
	}{
		{"type wildcard", "alice", "acme", "file", "delete", Allow, ReasonGranted},
		{"named action", "bob", "acme", "file", "read", Allow, ReasonGranted},
		{"action not granted", "bob", "acme", "file", "write", Deny, ReasonNoGrant},
		{"other tenant", "alice", "globex", "file", "read", Deny, ReasonNoGrant},
		{"all types all actions", "rita", "acme", "file", "anything", Allow, ReasonGranted},
		{"all types one action", "otto", "acme", "file", "read", Allow, ReasonGranted},
		{"all types other action", "otto", "acme", "file", "write", Deny, ReasonNoGrant},
		{"rebac type", "alice", "acme", "doc", "read", Pass, ReasonReBAC},
		{"rebac type allowed by a role", "rita", "acme", "doc", "read", Allow, ReasonGranted},
		{"rebac type unknown subject", "zed", "acme", "doc", "read", Pass, ReasonReBAC},
		{"unknown type", "alice", "acme", "video", "read", Pass, ReasonUnknownType},
		{"unknown subject", "zed", "acme", "file", "read", Pass, ReasonUnknownSubject},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := s.Decide(tc.subject, tc.tenant, tc.typ, tc.action)
			if got != tc.want || reason != tc.reason {
				t.Fatalf("Decide = %v %s; want %v %s", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestDecodeSnapshotRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*api.EdgeSnapshot)
	}{
		{"version", func(s *api.EdgeSnapshot) { s.Version = 2 }},
		{"no time", func(s *api.EdgeSnapshot) { s.GeneratedAt = time.Time{} }},
		{"bad mode", func(s *api.EdgeSnapshot) { s.ResourceTypes["file"] = "abac" }},
		{"bad grant", func(s *api.EdgeSnapshot) { s.Roles["admin"] = []string{"file"} }},
		{"undeclared type", func(s *api.EdgeSnapshot) { s.Roles["admin"] = []string{"video:play"} }},
		{"undefined role", func(s *api.EdgeSnapshot) { s.Assignments["bob"]["acme"] = []string{"ghost"} }},
		{"empty subject", func(s *api.EdgeSnapshot) { s.Assignments[""] = nil }},
		{"space in tenant", func(s *api.EdgeSnapshot) { s.Assignments["bob"]["a b"] = nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshotFixture()
			tc.edit(s)
			b, _ := json.Marshal(s)
			if _, err := DecodeSnapshot(b); !errors.Is(err, ErrBadSnapshot) || !errors.Is(err, api.ErrInvalidSnapshot) {
				t.Fatalf("DecodeSnapshot error %v, want ErrBadSnapshot wrapping api.ErrInvalidSnapshot", err)
			}
		})
	}
	if _, err := DecodeSnapshot([]byte(`{"version":`)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("truncated JSON: %v", err)
	}
}

// startFilter configures a Filter on a fake host with cfg and, if snap is not
// nil, loads it through a tick and a 200 reply.
func startFilter(t testing.TB, cfg string, snap *api.EdgeSnapshot) (*Filter, *fakeHost) {
	t.Helper()
	h := newFakeHost()
	f := NewFilter(h)
	f.OnContextCreate(1, 0)
	if !f.OnVMStart(0) {
		t.Fatal("OnVMStart false")
	}
	h.config = []byte(cfg)
	if !f.OnConfigure(1, len(h.config)) {
		t.Fatalf("OnConfigure false: %v", h.logs)
	}
	if snap != nil {
		f.OnTick(1)
		body, _ := json.Marshal(snap)
		h.reply.headers = proxywasm.Pairs(proxywasm.EncodePairs([][2]string{{":status", "200"}, {"etag", `"e1"`}}))
		h.reply.body = body
		f.OnHTTPCallResponse(1, h.calls[len(h.calls)-1].token, 2, len(body), 0)
		if rev, ok := f.SnapshotRevision(1); !ok || rev != snap.Revision {
			t.Fatalf("snapshot not loaded: %v", h.logs)
		}
	}
	f.OnContextCreate(2, 1)
	return f, h
}

func (h *fakeHost) request(f *Filter, hs [][2]string) proxywasm.Action {
	h.headers = proxywasm.Pairs(proxywasm.EncodePairs(hs))
	h.local, h.replaced, h.removed = nil, map[string]string{}, nil
	return f.OnRequestHeaders(2, len(hs), true)
}

func TestFilterRequest(t *testing.T) {
	f, h := startFilter(t, cfgJSON, snapshotFixture())
	tests := []struct {
		name    string
		headers [][2]string
		outcome Outcome
	}{
		{"allow", [][2]string{{":method", "GET"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}, Allow},
		{"deny", [][2]string{{":method", "DELETE"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}, Deny},
		{"pass unknown user", [][2]string{{":method", "GET"}, {":path", "/t/acme/files/1"}, {"x-user-id", "zed"}}, Pass},
		{"pass no route", [][2]string{{":method", "GET"}, {":path", "/x"}, {"x-user-id", "bob"}}, Pass},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := h.request(f, tc.headers)
			switch tc.outcome {
			case Allow:
				if a != proxywasm.ActionContinue || h.replaced[DecisionHeader] != "edge-allow" || h.local != nil {
					t.Fatalf("allow: action %d replaced %v local %+v", a, h.replaced, h.local)
				}
			case Deny:
				if a != proxywasm.ActionPause || h.local == nil || h.local.status != 403 || !strings.Contains(string(h.local.body), ReasonNoGrant) {
					t.Fatalf("deny: action %d local %+v", a, h.local)
				}
				if v, _ := h.local.headers.Get(ReasonHeader); v != ReasonNoGrant {
					t.Fatalf("deny reason header %q", v)
				}
			case Pass:
				if a != proxywasm.ActionContinue || len(h.replaced) != 0 || h.local != nil {
					t.Fatalf("pass: action %d replaced %v local %+v", a, h.replaced, h.local)
				}
			}
		})
	}
	st := f.Stats(1)
	if st.Allowed != 1 || st.Denied != 1 || st.Passed != 2 || st.SnapshotUpdates != 1 || st.CallsDispatched != 1 {
		t.Fatalf("stats %+v", st)
	}
	if h.counters[mDenied] != 0 {
		t.Fatal("request counts must wait for the next tick")
	}
	f.OnTick(1)
	if h.counters[mDenied] != 1 || h.counters[mPassed] != 2 {
		t.Fatalf("denied metric %d", h.counters[mDenied])
	}
}

func TestFilterJWTSubject(t *testing.T) {
	cfg := strings.Replace(cfgJSON, `{"header": "x-user-id"}`, `{"jwt_header": "x-jwt-payload", "claim": "sub"}`, 1)
	f, h := startFilter(t, cfg, snapshotFixture())
	base := [][2]string{{":method", "DELETE"}, {":path", "/t/acme/files/1"}}
	if a := h.request(f, append(base, [2]string{"x-jwt-payload", jwtPayload(map[string]any{"sub": "alice"})})); a != proxywasm.ActionContinue || h.replaced[DecisionHeader] != "edge-allow" {
		t.Fatalf("alice by JWT: action %d replaced %v", a, h.replaced)
	}
	if a := h.request(f, append(base, [2]string{"x-jwt-payload", jwtPayload(map[string]any{"sub": "bob"})})); a != proxywasm.ActionPause {
		t.Fatalf("bob by JWT: action %d", a)
	}
	if a := h.request(f, append(base, [2]string{"x-user-id", "alice"})); a != proxywasm.ActionContinue || len(h.replaced) != 0 {
		t.Fatalf("header ignored when the subject comes from the JWT: action %d replaced %v", a, h.replaced)
	}
}

func TestFilterSnapshotLifecycle(t *testing.T) {
	f, h := startFilter(t, cfgJSON, nil)
	deleteReq := [][2]string{{":method", "DELETE"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}
	if a := h.request(f, deleteReq); a != proxywasm.ActionContinue || h.local != nil {
		t.Fatal("no snapshot must pass")
	}
	// A failing dispatch is counted and retried next tick.
	h.failCall = true
	f.OnTick(1)
	h.failCall = false
	if st := f.Stats(1); st.FetchFailures != 1 {
		t.Fatalf("stats %+v", st)
	}
	f.OnTick(1)
	body, _ := json.Marshal(snapshotFixture())
	h.reply.headers = proxywasm.Pairs(proxywasm.EncodePairs([][2]string{{":status", "200"}, {"etag", `"e1"`}}))
	h.reply.body = body
	// A reply to another token is stale.
	f.OnHTTPCallResponse(1, 999, 2, len(body), 0)
	if _, ok := f.SnapshotRevision(1); ok {
		t.Fatal("stale reply loaded a snapshot")
	}
	f.OnHTTPCallResponse(1, h.token, 2, len(body), 0)
	if a := h.request(f, deleteReq); a != proxywasm.ActionPause {
		t.Fatal("want deny with a snapshot")
	}
	// Past max age: pass.
	h.now += 6e9
	if a := h.request(f, deleteReq); a != proxywasm.ActionContinue || h.local != nil {
		t.Fatal("stale snapshot must pass")
	}
	// Clock going backwards is not trusted either.
	h.now -= 60e9
	if a := h.request(f, deleteReq); a != proxywasm.ActionContinue {
		t.Fatal("clock before confirmation must pass")
	}
	h.now += 54e9
	// Oversized replies are rejected.
	f.OnTick(1)
	f.OnHTTPCallResponse(1, h.token, 2, 17<<20, 0)
	if st := f.Stats(1); st.SnapshotRejected != 1 {
		t.Fatalf("stats %+v", st)
	}
	// 304 for an ETag the filter does not hold is a failure.
	f.OnTick(1)
	h.reply.headers = proxywasm.Pairs(proxywasm.EncodePairs([][2]string{{":status", "304"}, {"etag", `"other"`}}))
	f.OnHTTPCallResponse(1, h.token, 2, 0, 0)
	if st := f.Stats(1); st.FetchFailures != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A stuck call is given up after twice its timeout.
	f.OnTick(1)
	n := len(h.calls)
	f.OnTick(1)
	if len(h.calls) != n {
		t.Fatal("second call while one is in flight")
	}
	h.now += 3 * int64(time.Second)
	f.OnTick(1)
	if len(h.calls) != n+1 {
		t.Fatal("stuck call not given up")
	}
	// Deleting contexts forgets them.
	f.OnDelete(2)
	f.OnDelete(1)
	if a := f.OnRequestHeaders(2, 0, true); a != proxywasm.ActionContinue {
		t.Fatal("unknown stream must continue")
	}
}

func TestFilterAllocs(t *testing.T) {
	f, h := startFilter(t, cfgJSON, snapshotFixture())
	tests := []struct {
		name string
		hs   [][2]string
	}{
		{"allow", [][2]string{{":method", "GET"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}},
		{"deny", [][2]string{{":method", "DELETE"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h.headers = proxywasm.Pairs(proxywasm.EncodePairs(tc.hs))
			n := testing.AllocsPerRun(100, func() { f.OnRequestHeaders(2, len(tc.hs), true) })
			if n != 0 {
				t.Fatalf("%v allocations per request", n)
			}
		})
	}
}

// BenchmarkOnRequestHeaders measures the filter's decision natively, with a
// fake host: the Go cost without the Wasm boundary.
func BenchmarkOnRequestHeaders(b *testing.B) {
	f, h := startFilter(b, cfgJSON, snapshotFixture())
	tests := []struct {
		name string
		hs   [][2]string
	}{
		{"allow", [][2]string{{":method", "GET"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}},
		{"deny", [][2]string{{":method", "DELETE"}, {":path", "/t/acme/files/1"}, {"x-user-id", "bob"}}},
	}
	for _, tc := range tests {
		b.Run(tc.name, func(b *testing.B) {
			h.headers = proxywasm.Pairs(proxywasm.EncodePairs(tc.hs))
			b.ReportAllocs()
			for b.Loop() {
				f.OnRequestHeaders(2, len(tc.hs), true)
			}
		})
	}
}
