package builtins

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/engine"
	"github.com/nexuspdp/nexus/internal/jsonscan"
)

// EnvoyDecide is nexus.envoy_decide(table, request): the default policy's
// answer to a proxied HTTP request, an opa-envoy-plugin result object.
// table is the policy's route rules and ABAC conditions (AppendTable);
// request is the JSON array [method, path segments, JWT payloads, subject
// header, tenant header]: the payloads Envoy's jwt_authn filter verified
// (its metadata; null or false without one) and the headers' values (null
// for an absent subject header, "" for an absent tenant header). A JWT
// decides the subject, when it has exactly one distinct "sub"; the header
// counts only without a JWT.
//
// The first route rule that matches names the action and the resource
// (its "{id}" segment) and maybe its tenant (its "{tenant}" segment, else
// the tenant header). No rule is a 403 "no_route"; no subject a 401
// "no_subject"; a subject, tenant or resource ID that is not an ID the
// store can hold a 400 "invalid_request". Those answers name the subject
// ("subject") when the request named a valid one, as every other does. Otherwise the check is decided
// as nexus.authz's decide does (tenant, ABAC conditions, RBAC, ReBAC): an
// allow with the subject and the reason in headers, or a 403 with the
// reason.
func EnvoyDecide(ctx context.Context, s Store, dst []byte, table, request string) ([]byte, error) {
	t, err := tableOf(table)
	if err != nil {
		return dst, err
	}
	var req envoyRequest
	if err := req.parse(request); err != nil {
		return dst, err
	}
	out, rerr := dst, error(nil)
	if err := withView(ctx, s, func(l storeView) error {
		out, rerr = envoyResult(reader{l}, dst, t, &req, req.path)
		return nil
	}); err != nil {
		return dst, fmt.Errorf("nexus.envoy_decide: %w", err)
	}
	if rerr != nil {
		return dst, rerr
	}
	return out, nil
}

// envoyDecideValues is nexus.envoy_decide as the engine calls it: its
// arguments read in place, the request either the array itself (the
// default policy passes it so) or its JSON text, and the answer written
// as values. An argument of another type makes the call undefined.
func envoyDecideValues(ctx context.Context, s Store, w *engine.ValueWriter, table, request engine.Value) error {
	text, ok := table.Str()
	if !ok {
		return nil
	}
	var req envoyRequest
	var segs [8]string // the path's segments, for most paths
	path := segs[:0]
	switch request.Kind() {
	case engine.KindString:
	case engine.KindArray:
		var err error
		if path, err = req.read(request, path); err != nil {
			return err
		}
	default:
		return nil
	}
	t, err := tableOf(text)
	if err != nil {
		return err
	}
	if request.Kind() == engine.KindString {
		raw, _ := request.Str()
		if err := req.parse(raw); err != nil {
			return err
		}
		path = req.path
	}
	var a answer
	if err := withView(ctx, s, func(l storeView) error {
		a, err = envoyAnswer(reader{l}, t, &req, path)
		return nil
	}); err != nil {
		return fmt.Errorf("nexus.envoy_decide: %w", err)
	}
	if err != nil {
		return err
	}
	writeAnswer(w, &a)
	return nil
}

// envoyResult appends the result object for req, canonical JSON (keys
// sorted, compact): envoyAnswer's answer, written. It reads the store
// through r. path is the request's path segments (req.path, unless the
// caller keeps them apart).
func envoyResult(r reader, dst []byte, t *Table, req *envoyRequest, path []string) ([]byte, error) {
	a, err := envoyAnswer(r, t, req, path)
	if err != nil {
		return dst, err
	}
	return a.appendJSON(dst), nil
}

// envoyAnswer is nexus.envoy_decide's answer to req.
func envoyAnswer(r reader, t *Table, req *envoyRequest, path []string) (answer, error) {
	m, ok, err := t.route(req.method, path)
	if err != nil {
		return answer{}, fmt.Errorf("nexus.envoy_decide: %w", err)
	}
	// The subject the request names, when it is a valid ID: the early
	// denials name it too, for the decision log.
	known := ""
	if req.claimed && req.subjectOK && validID(req.subject) {
		known = req.subject
	}
	if !ok {
		a := answerNoRule
		a.Subject = known
		return a, nil
	}
	if !req.claimed {
		return answerNoSubject, nil
	}
	tenant := req.tenant
	if m.tenant.found {
		tenant = m.tenant.value
	}
	switch {
	case known == "":
		return invalidAnswer("subject", ""), nil
	case tenant != "" && !validID(tenant):
		return invalidAnswer("tenant", known), nil
	case m.id.found && !validID(m.id.value):
		return invalidAnswer("resource", known), nil
	}
	allow, reason, err := decide(r, t, "user", req.subject, m.rule.Action, m.rule.Type, m.id.value, tenant)
	if err != nil {
		return answer{}, err
	}
	if allow {
		return envoyAllow(reason, req.subject), nil
	}
	return envoyDeny(reason, req.subject), nil
}

// envoyRequest is nexus.envoy_decide's request argument, the JSON array
// [method, path segments, JWT payloads, subject header, tenant header].
type envoyRequest struct {
	method    string
	path      []string
	claimed   bool   // the request names a subject
	subject   string // the subject, when subjectOK
	subjectOK bool   // the subject named is a string
	tenant    string
}

func (r *envoyRequest) parse(request string) error {
	bad := func(why string) error {
		return fmt.Errorf("nexus.envoy_decide: the request is not [method, path, JWT payloads, subject header, tenant header]: %s", why)
	}
	sc := jsonscan.NewScanner(request)
	if !sc.Next('[') {
		return bad("not an array")
	}
	var ok bool
	if r.method, ok = sc.Str(); !ok || !sc.Next(',') || !sc.Next('[') {
		return bad("method")
	}
	for first := true; !sc.Next(']'); first = false {
		if !first && !sc.Next(',') {
			return bad("path")
		}
		seg, ok := sc.Str()
		if !ok {
			return bad("path")
		}
		r.path = append(r.path, seg)
	}
	if !sc.Next(',') {
		return bad("JWT payloads")
	}
	jwt, ok := sc.Value()
	if !ok || !sc.Next(',') {
		return bad("JWT payloads")
	}
	header, ok := sc.Value()
	if !ok || !sc.Next(',') {
		return bad("subject header")
	}
	if r.tenant, ok = sc.Str(); !ok || !sc.Next(']') || !sc.Done() {
		return bad("tenant header")
	}
	if err := r.identify(jwt, header); err != nil {
		return bad(err.Error())
	}
	return nil
}

// read reads the request from the array value v, as parse reads its
// JSON text (json.marshal of v): strings that are not UTF-8 read with
// U+FFFD in place of each bad byte, as the JSON text decodes. It
// appends the path's segments to path (not to r.path) and returns it.
func (r *envoyRequest) read(v engine.Value, path []string) ([]string, error) {
	bad := func(why string) error {
		return fmt.Errorf("nexus.envoy_decide: the request is not [method, path, JWT payloads, subject header, tenant header]: %s", why)
	}
	if v.Len() != 5 {
		return path, bad("not an array of five")
	}
	var ok bool
	if r.method, ok = valueStr(v.Index(0)); !ok {
		return path, bad("method")
	}
	segs := v.Index(1)
	if segs.Kind() != engine.KindArray {
		return path, bad("path")
	}
	for i := range segs.Len() {
		seg, ok := valueStr(segs.Index(i))
		if !ok {
			return path, bad("path")
		}
		path = append(path, seg)
	}
	if r.tenant, ok = valueStr(v.Index(4)); !ok {
		return path, bad("tenant header")
	}
	jwt, header := v.Index(2), v.Index(3)
	if b, isBool := jwt.Bool(); jwt.Kind() == engine.KindNull || (isBool && !b) {
		// No JWT: the subject header, as identify reads its JSON.
		switch header.Kind() {
		case engine.KindNull:
			return path, nil
		case engine.KindBool:
			r.claimed, _ = header.Bool() // false names no subject
		case engine.KindString:
			r.claimed = true
			r.subject, r.subjectOK = valueStr(header)
		default:
			r.claimed = true
		}
		return path, nil
	}
	if err := r.identify(string(jwt.AppendJSON(nil)), "null"); err != nil {
		return path, bad(err.Error())
	}
	return path, nil
}

// valueStr is the string v holds, as json.marshal's text of it decodes:
// a byte that is not UTF-8 becomes U+FFFD.
func valueStr(v engine.Value) (string, bool) {
	s, ok := v.Str()
	if !ok {
		return "", false
	}
	if utf8.ValidString(s) {
		return s, true
	}
	return jsonscan.Unquote(string(v.AppendJSON(nil)))
}

// writeAnswer writes a's result document as appendJSON writes it, key
// for key in the same order, as values.
func writeAnswer(w *engine.ValueWriter, a *answer) {
	w.BeginObject()
	w.String("allowed")
	w.Bool(a.Allowed)
	if !a.Allowed {
		w.String("body")
		writeStr(w, a.Body)
	}
	w.String("headers")
	w.BeginObject()
	for _, h := range a.Headers[:a.NHeaders] {
		writeStr(w, h.Key)
		writeStr(w, h.Value)
	}
	w.End()
	if !a.Allowed {
		w.String("http_status")
		w.Int(int64(a.Status))
	}
	w.String("reason")
	writeStr(w, a.Reason)
	if a.Subject != "" {
		w.String("subject")
		writeStr(w, a.Subject)
	}
	w.End()
}

// writeStr writes s as appendJSON's text of it reads: a byte that is not
// UTF-8 becomes U+FFFD.
func writeStr(w *engine.ValueWriter, s string) {
	if utf8.ValidString(s) {
		w.String(s)
		return
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b = utf8.AppendRune(b, r) // RuneError for a bad byte (n == 1)
		i += n
	}
	w.String(string(b))
}

// identify sets the subject the request claims from the JSON texts of the
// JWT payloads and the subject header.
func (r *envoyRequest) identify(jwt, header string) error {
	var claim string // the subject's JSON, "" for none
	if jwt == "null" || jwt == "false" {
		// No JWT: the subject header, when the request has it.
		if header != "null" {
			claim = header
		}
	} else {
		// A verified JWT decides: exactly one distinct "sub" among its
		// payloads names the subject, anything else none.
		subs, err := jwtSubjects(jwt)
		if err != nil {
			return err
		}
		if len(subs) == 1 {
			claim = subs[0]
		}
	}
	if claim == "" || claim == "false" {
		return nil // false names no subject either
	}
	r.claimed = true
	if claim[0] == '"' {
		r.subject, r.subjectOK = jsonscan.Unquote(claim)
	}
	return nil
}

// jwtSubjects lists the distinct "sub" claims (as JSON) of the payloads
// Envoy's jwt_authn filter wrote: the values of an object (or the elements
// of an array) that are objects with a "sub".
func jwtSubjects(jwt string) ([]string, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(jwt))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var payloads []any
	switch p := v.(type) {
	case map[string]any:
		payloads = slices.Collect(maps.Values(p))
	case []any:
		payloads = p
	}
	var subs []string
	for _, p := range payloads {
		obj, ok := p.(map[string]any)
		if !ok {
			continue
		}
		sub, ok := obj["sub"]
		if !ok {
			continue
		}
		b, err := json.Marshal(canonical(sub))
		if err != nil {
			return nil, err
		}
		if !slices.Contains(subs, string(b)) {
			subs = append(subs, string(b))
		}
	}
	return subs, nil
}

// canonical makes numbers that Rego holds equal (1 and 1.0) the same.
func canonical(v any) any {
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			return f
		}
	}
	return v
}

// validID reports whether s is an ID a request may name: not empty, not a
// dot segment a server may resolve, and one the store can hold.
func validID(s string) bool {
	return s != "" && s != "." && s != ".." && api.ValidID(s)
}

// decide is nexus.authz's decide for a resource without attributes:
// whether subType:subID may do action on the resource typ:id in the
// tenant the request claims ("" for none), and why.
func decide(r reader, t *Table, subType, subID, action, typ, id, tenant string) (bool, string, error) {
	vd, tenant, err := r.resourceTenant(subType, subID, typ, id, tenant)
	switch {
	case err != nil:
		return false, "", err
	case vd == verdictMismatch:
		return false, "tenant_mismatch", nil
	case vd == verdictNone:
		return false, "no_tenant", nil
	}
	denial, denied := "", false
	for _, c := range t.Conditions {
		// Without attributes, every attribute is null.
		if c.AppliesTo(typ, action) && c.Value == nil && (!denied || c.Reason < denial) {
			denial, denied = c.Reason, true
		}
	}
	if denied {
		return false, denial, nil
	}
	g, err := r.grant(subType, subID, action, typ, id, tenant)
	if err != nil {
		return false, "", err
	}
	if g != "" {
		return true, g, nil
	}
	return false, "no_grant", nil
}
