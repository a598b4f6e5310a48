package builtins

import "testing"

// TestAnswerJSON: every answer nexus.envoy_decide gives is written as
// the default policy's Wasm writes it, byte for byte (canonical JSON).
func TestAnswerJSON(t *testing.T) {
	for _, c := range []struct {
		a    answer
		want string
	}{
		{answerNoRule, `{"allowed":false,"body":"{\"error\":\"no route rule matches this request\"}","headers":{"content-type":"application/json"},"http_status":403,"reason":"no_route"}`},
		{answerNoSubject, `{"allowed":false,"body":"{\"error\":\"no subject: a verified JWT is required\"}","headers":{"content-type":"application/json","www-authenticate":"Bearer realm=\"nexus\""},"http_status":401,"reason":"no_subject"}`},
		{invalidAnswer("tenant", ""), `{"allowed":false,"body":"{\"error\":\"the request's tenant is not a valid ID\"}","headers":{"content-type":"application/json"},"http_status":400,"reason":"invalid_request"}`},
		{envoyAllow("rebac", "alice"), `{"allowed":true,"headers":{"x-nexus-decision":"rebac","x-nexus-subject":"alice"},"reason":"rebac","subject":"alice"}`},
		{envoyAllow("rbac", `a"<b`), `{"allowed":true,"headers":{"x-nexus-decision":"rbac","x-nexus-subject":"a\"\u003cb"},"reason":"rbac","subject":"a\"\u003cb"}`},
		{envoyDeny("no_grant", "bob"), `{"allowed":false,"body":"{\"error\":\"forbidden\",\"reason\":\"no_grant\"}","headers":{"content-type":"application/json","x-nexus-decision":"no_grant"},"http_status":403,"reason":"no_grant","subject":"bob"}`},
		{envoyDeny("tenant_mismatch", "bob"), `{"allowed":false,"body":"{\"error\":\"forbidden\",\"reason\":\"tenant_mismatch\"}","headers":{"content-type":"application/json","x-nexus-decision":"tenant_mismatch"},"http_status":403,"reason":"tenant_mismatch","subject":"bob"}`},
		{envoyDeny("archived", "bob"), `{"allowed":false,"body":"{\"error\":\"forbidden\",\"reason\":\"archived\"}","headers":{"content-type":"application/json","x-nexus-decision":"archived"},"http_status":403,"reason":"archived","subject":"bob"}`},
	} {
		if got := string(c.a.appendJSON([]byte("x"))); got != "x"+c.want {
			t.Errorf("%+v:\n got %s\nwant x%s", c.a, got, c.want)
		}
	}
}
