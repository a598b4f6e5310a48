package appapi

import (
	"net/http"
	"strconv"

	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/internal/jsonw"
	"github.com/nexuspdp/nexus/pdp"
)

// writeDecision answers one decision with 200 and the body
// {"<allowKey>":b[,"<legacyKey>":b][,"<ctxKey>":{"reason":"..."}]}, byte for
// byte what wire.WriteJSON writes for permitResponse(d) (legacyKey
// "result", ctxKey "debug") and authzenResponse(d) (ctxKey "context"),
// without reflection or a map per answer: on the hot path of /allowed and
// AuthZEN's evaluation.
func writeDecision(w http.ResponseWriter, d pdp.Decision, allowKey, legacyKey, ctxKey string) {
	b := make([]byte, 0, 96)
	b = append(append(append(b, `{"`...), allowKey...), `":`...)
	b = strconv.AppendBool(b, d.Allowed)
	if legacyKey != "" {
		b = append(append(append(b, `,"`...), legacyKey...), `":`...)
		b = strconv.AppendBool(b, d.Allowed)
	}
	if d.Reason != "" {
		b = append(append(append(b, `,"`...), ctxKey...), `":{"reason":`...)
		b = append(jsonw.String(b, d.Reason), '}')
	}
	b = append(b, "}\n"...)
	wire.SetJSON(w)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// writePermit writes wire.WriteJSON(w, 200, permitResponse(d)).
func writePermit(w http.ResponseWriter, d pdp.Decision) {
	writeDecision(w, d, "allow", "result", "debug")
}

// writeAuthZEN writes wire.WriteJSON(w, 200, authzenResponse(d)).
func writeAuthZEN(w http.ResponseWriter, d pdp.Decision) {
	writeDecision(w, d, "decision", "", "context")
}
