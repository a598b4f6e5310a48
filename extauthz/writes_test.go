package extauthz_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// writeAnswer is POST /v1/relationships' answer.
type writeAnswer struct {
	Outcome  string `json:"outcome"`
	Revision uint64 `json:"revision"`
	WriteID  string `json:"write_id"`
	Reason   string `json:"reason"`
	Error    string `json:"error"`
}

func writeRel(t *testing.T, ts *testServer, body string, header ...string) (int, writeAnswer) {
	t.Helper()
	status, _, b := post(t, ts.admin+"/v1/relationships", body, header...)
	var a writeAnswer
	if err := json.Unmarshal([]byte(b), &a); err != nil {
		t.Fatalf("answer %d %q: %v", status, b, err)
	}
	return status, a
}

func holds(t *testing.T, ts *testServer, query, subject string) bool {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ts.admin+"/v1/relationships?"+query, nil)
	_, _, body := do(t, req)
	return strings.Contains(body, subject)
}

// TestWritePreconditions: preconditions over HTTP as in the Go API: a
// tuple or a filter that must or must not exist; a failed one is a 409
// precondition_failed and writes nothing; malformed ones are 400s.
func TestWritePreconditions(t *testing.T) {
	ts := newTestServer(t, nil)
	claim := `{"touches":["folder:q3#viewer@user:carol"],"preconditions":[{"op":"must_not_exist","tuple":"folder:q3#viewer@user:carol"}]}`
	status, a := writeRel(t, ts, claim)
	if status != 200 || a.Outcome != "written" || a.Revision == 0 || a.WriteID == "" {
		t.Fatalf("first claim: %d %+v", status, a)
	}
	status, a = writeRel(t, ts, `{"touches":["folder:q3#viewer@user:zoe"],"preconditions":[{"op":"must_not_exist","tuple":"folder:q3#viewer@user:carol"}]}`)
	if status != 409 || a.Outcome != "not_written" || a.Reason != "precondition_failed" {
		t.Fatalf("failed precondition: %d %+v", status, a)
	}
	if holds(t, ts, "object_type=folder&object_id=q3&relation=viewer", "zoe") {
		t.Fatal("a write whose precondition failed wrote")
	}
	status, a = writeRel(t, ts, `{"touches":["folder:q3#viewer@user:erin"],"preconditions":[{"op":"must_exist","filter":{"object_type":"folder","object_id":"q3","relation":"viewer"}}]}`)
	if status != 200 || a.Outcome != "written" {
		t.Fatalf("must_exist filter: %d %+v", status, a)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"exists","tuple":"folder:q3#viewer@user:carol"}]}`, "must_exist or must_not_exist"},
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"must_exist"}]}`, "a tuple or a filter"},
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"must_exist","tuple":"folder:q3#viewer@user:carol","filter":{"object_type":"folder"}}]}`, "a tuple or a filter"},
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"must_exist","tuple":"folder:q3"}]}`, "preconditions[0].tuple"},
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"must_exist","filter":{"object_id":"q3"}}]}`, "object_type"},
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"must_exist","filter":{"object_type":"folder","oid":"q3"}}]}`, "unknown field"},
		{`{"touches":["folder:q3#viewer@user:x"],"preconditions":[{"op":"must_exist","tuple":"folder:q3#viewer@user:carol","must_exist":true}]}`, "unknown field"},
	} {
		status, a := writeRel(t, ts, tt.body)
		if status != 400 || !strings.Contains(a.Error, tt.want) {
			t.Errorf("%s: %d %+v, want 400 with %q", tt.body, status, a, tt.want)
		}
	}
	if holds(t, ts, "object_type=folder&object_id=q3&relation=viewer", "user:x") {
		t.Fatal("a malformed write wrote")
	}
}

// TestIdempotencyKey: a write retried with its Idempotency-Key gets the
// first outcome and is not applied again, even after the tuple was
// deleted in between (the retry of a grant must not undo a revoke).
func TestIdempotencyKey(t *testing.T) {
	ts := newTestServer(t, nil)
	grant := `{"touches":["folder:q3#viewer@user:mallory"]}`
	status, first := writeRel(t, ts, grant, "Idempotency-Key", "grant-mallory-1")
	if status != 200 || first.WriteID != "grant-mallory-1" {
		t.Fatalf("grant: %d %+v", status, first)
	}
	if status, a := writeRel(t, ts, `{"deletes":["folder:q3#viewer@user:mallory"]}`); status != 200 {
		t.Fatalf("revoke: %d %+v", status, a)
	}
	status, again := writeRel(t, ts, grant, "Idempotency-Key", "grant-mallory-1")
	if status != 200 || again.Revision != first.Revision || again.Outcome != "written" {
		t.Fatalf("retry: %d %+v, want the first outcome %+v", status, again, first)
	}
	if holds(t, ts, "object_type=folder&object_id=q3&relation=viewer", "mallory") {
		t.Fatal("the retry applied the grant again after the revoke")
	}
	// A refused write's retry is refused alike.
	pre := `{"touches":["folder:q3#viewer@user:oscar"],"preconditions":[{"op":"must_exist","tuple":"folder:q3#viewer@user:nobody"}]}`
	for range 2 {
		if status, a := writeRel(t, ts, pre, "Idempotency-Key", "k-pre"); status != 409 || a.Reason != "precondition_failed" {
			t.Fatalf("refused write with a key: %d %+v", status, a)
		}
	}
	for _, key := range []string{"has space", strings.Repeat("k", 129), "caf\u00e9"} {
		if status, a := writeRel(t, ts, grant, "Idempotency-Key", key); status != 400 || !strings.Contains(a.Error, "Idempotency-Key") {
			t.Errorf("key %q: %d %+v, want 400", key, status, a)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, ts.admin+"/v1/relationships", strings.NewReader(grant))
	req.Header["Idempotency-Key"] = []string{""}
	if status, _, body := do(t, req); status != 400 {
		t.Errorf("empty key: %d %s, want 400", status, body)
	}
}

// TestReadyzWrites: /readyz reports writes apart from checks: a replica
// whose log is away stays ready for checks and says writes are
// unavailable, and why.
func TestReadyzWrites(t *testing.T) {
	const reason = "no JetStream quorum"
	var down atomic.Bool
	ts := newTestServer(t, func(c *testConfig) {
		c.Writes = func() (bool, string) {
			if down.Load() {
				return false, reason
			}
			return true, ""
		}
	})
	get := func() (int, map[string]string) {
		req, _ := http.NewRequest(http.MethodGet, ts.admin+"/readyz", nil)
		status, _, body := do(t, req)
		var m map[string]string
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		return status, m
	}
	if status, m := get(); status != 200 || m["checks"] != "ready" || m["writes"] != "available" {
		t.Fatalf("writes available: %d %v", status, m)
	}
	down.Store(true)
	if status, m := get(); status != 200 || m["checks"] != "ready" || m["writes"] != "unavailable" || m["writes_reason"] != reason {
		t.Fatalf("writes unavailable: %d %v", status, m)
	}
}
