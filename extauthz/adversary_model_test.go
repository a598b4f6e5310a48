package extauthz_test

// The reference model of the adversarial test (adversary_test.go): the
// default policy's documented rules, written again from the README, the
// comments of defaults/policy and the drive schema, without
// calling the policy, the engine or the store's Check. It reads only the
// data the rules are written in (the route rules, conditions and tenant
// header of data.json; the relations, permissions and role grants of
// schema.yaml) and evaluates the permission expressions with its own
// small recursive evaluator over the world's tuples.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nexuspdp/nexus/defaults/drive"
	"github.com/nexuspdp/nexus/defaults/policy"
)

// advRules are the documented rules: the schema and the policy's data.
type advRules struct {
	tenantType string              // the type of tenants (roles.type)
	grants     map[string][]string // tenant role -> grants "type:action"
	types      map[string]*advType

	tenantHeader string
	routes       []advRoute
	conditions   []advCondition
}

type advType struct {
	relations map[string][]string  // relation -> allowed subject types
	perms     map[string][]advTerm // permission -> union of its terms
	inherit   []string             // relations a resource without a tenant inherits one through
	required  bool                 // a resource named by ID without a tenant is in none: denied
}

// advTerm is one term of a union: a relation or permission of the same
// object (via == ""), or via->name: name on each object that via names.
type advTerm struct{ via, name string }

type advRoute struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Action string `json:"action"`
	Type   string `json:"type"`
}

type advCondition struct {
	Type      string   `json:"type"`
	Actions   []string `json:"actions"`
	Attribute string   `json:"attribute"`
	Value     any      `json:"value"`
	Reason    string   `json:"reason"`
}

// advLoadRules reads schema.yaml and data.json. It fails on anything the
// model does not know how to evaluate, rather than guess.
func advLoadRules(tb testing.TB) *advRules {
	tb.Helper()
	var sc struct {
		Types map[string]struct {
			Relations   map[string][]string `yaml:"relations"`
			Permissions map[string]string   `yaml:"permissions"`
			Tenancy     struct {
				Inherit  []string `yaml:"inherit"`
				Required bool     `yaml:"required"`
			} `yaml:"tenancy"`
		} `yaml:"types"`
		Roles struct {
			Type   string              `yaml:"type"`
			Grants map[string][]string `yaml:"grants"`
		} `yaml:"roles"`
	}
	if err := yaml.Unmarshal(drive.Schema, &sc); err != nil {
		tb.Fatalf("model: schema.yaml: %v", err)
	}
	r := &advRules{tenantType: sc.Roles.Type, grants: sc.Roles.Grants, types: map[string]*advType{}}
	for name, t := range sc.Types {
		at := &advType{relations: t.Relations, perms: map[string][]advTerm{}, inherit: t.Tenancy.Inherit, required: t.Tenancy.Required}
		for p, src := range t.Permissions {
			if strings.ContainsAny(strings.ReplaceAll(src, "->", ""), "&-()") {
				tb.Fatalf("model: %s#%s = %q: only unions of relations and arrows are modelled", name, p, src)
			}
			for _, term := range strings.Split(src, "+") {
				term = strings.TrimSpace(term)
				via, n, arrow := strings.Cut(term, "->")
				if !arrow {
					via, n = "", term
				}
				at.perms[p] = append(at.perms[p], advTerm{via: strings.TrimSpace(via), name: strings.TrimSpace(n)})
			}
		}
		r.types[name] = at
	}
	b, err := policy.FS.ReadFile("data.json")
	if err != nil {
		tb.Fatal(err)
	}
	var data struct {
		Nexus struct {
			TenantHeader  string         `json:"tenant_header"`
			SubjectHeader *string        `json:"subject_header"`
			Routes        []advRoute     `json:"routes"`
			Conditions    []advCondition `json:"conditions"`
		} `json:"nexus"`
	}
	if err := json.Unmarshal(b, &data); err != nil {
		tb.Fatalf("model: data.json: %v", err)
	}
	if data.Nexus.SubjectHeader != nil {
		tb.Fatalf("model: data.json names a subject header; the default policy must trust none")
	}
	r.tenantHeader = data.Nexus.TenantHeader
	r.routes = data.Nexus.Routes
	r.conditions = data.Nexus.Conditions
	if len(r.routes) == 0 || r.tenantType == "" || len(r.grants) == 0 {
		tb.Fatalf("model: the rules have no routes, tenant type or grants")
	}
	return r
}

// advSubject is a subject: an object, or a userset when rel is set.
type advSubject struct{ typ, id, rel string }

func (s advSubject) String() string {
	if s.rel != "" {
		return s.typ + ":" + s.id + "#" + s.rel
	}
	return s.typ + ":" + s.id
}

// advTuple is one relationship: sub has rel on objType:objID.
type advTuple struct {
	objType, objID, rel string
	sub                 advSubject
}

func (t advTuple) String() string {
	return t.objType + ":" + t.objID + "#" + t.rel + "@" + t.sub.String()
}

// advWorld is the model's view of the store: the tuples of one world.
type advWorld struct {
	rules  *advRules
	tuples []advTuple
	byRel  map[string][]advSubject // "type:id#rel" -> subjects

	// The world's names, for the request generator.
	tenants, users, groups, folders, files []string
}

func newAdvWorld(r *advRules, tuples []advTuple) *advWorld {
	w := &advWorld{rules: r, tuples: tuples, byRel: map[string][]advSubject{}}
	for _, t := range tuples {
		k := t.objType + ":" + t.objID + "#" + t.rel
		if !slices.Contains(w.byRel[k], t.sub) {
			w.byRel[k] = append(w.byRel[k], t.sub)
		}
	}
	return w
}

// has reports whether sub (an object, never a userset here) has name (a
// relation or a permission) on typ:id. A relation holds through a tuple
// naming sub, or through a userset tuple whose userset sub is in; a
// permission holds when one term of its union holds. An evaluation that
// comes back to where it started finds nothing there (cycles are cut).
func (w *advWorld) has(typ, id, name string, sub advSubject, path map[string]bool) bool {
	key := typ + ":" + id + "#" + name
	if path[key] {
		return false
	}
	path[key] = true
	defer delete(path, key)
	t := w.rules.types[typ]
	if t == nil {
		return false
	}
	if _, ok := t.relations[name]; ok {
		for _, s := range w.byRel[key] {
			if s.rel == "" && s.typ == sub.typ && s.id == sub.id {
				return true
			}
			if s.rel != "" && w.has(s.typ, s.id, s.rel, sub, path) {
				return true
			}
		}
		return false
	}
	for _, term := range t.perms[name] {
		if term.via == "" {
			if w.has(typ, id, term.name, sub, path) {
				return true
			}
			continue
		}
		for _, o := range w.byRel[typ+":"+id+"#"+term.via] {
			if o.rel == "" && w.has(o.typ, o.id, term.name, sub, path) {
				return true
			}
		}
	}
	return false
}

// storedTenants are the tenants the store assigns typ:id to: its own
// (its tenant relation), else those of the objects its type's tenancy
// inherits through, each the same way (README: a file in a folder is in
// the folder's tenant). An object met again on the way adds nothing.
func (w *advWorld) storedTenants(typ, id string) []string {
	return w.tenantsOf(typ, id, map[string]bool{})
}

func (w *advWorld) tenantsOf(typ, id string, seen map[string]bool) []string {
	if seen[typ+":"+id] {
		return nil
	}
	seen[typ+":"+id] = true
	var out []string
	for _, s := range w.byRel[typ+":"+id+"#tenant"] {
		if s.typ == w.rules.tenantType && s.rel == "" && !slices.Contains(out, s.id) {
			out = append(out, s.id)
		}
	}
	if len(out) > 0 || w.rules.types[typ] == nil {
		return out
	}
	for _, rel := range w.rules.types[typ].inherit {
		for _, p := range w.byRel[typ+":"+id+"#"+rel] {
			if p.rel != "" {
				continue
			}
			for _, t := range w.tenantsOf(p.typ, p.id, seen) {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// roles are the tenant roles sub holds directly in tenant.
func (w *advWorld) roles(sub advSubject, tenant string) []string {
	var out []string
	for _, t := range w.tuples {
		if t.objType == w.rules.tenantType && t.objID == tenant && t.sub == sub {
			out = append(out, t.rel)
		}
	}
	return out
}

// advValidID: letters, digits and _-.=+/|~, 1 to 256 bytes (README: IDs
// the store can hold).
// advValidSegmentID is advValidID for IDs a proxied request names: "." and
// ".." are path segments a server may resolve, never IDs.
func advValidSegmentID(s string) bool { return s != "." && s != ".." && advValidID(s) }

func advValidID(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("_-.=+/|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// advVerdict is the model's answer with its explanation.
type advVerdict struct {
	allow bool
	why   string
}

func advDeny(format string, args ...any) advVerdict {
	return advVerdict{why: fmt.Sprintf(format, args...)}
}

// advCheck is an application check (AuthZEN, /allowed): the caller is a
// trusted application, so the subject and the attributes are taken as
// given; the tenant is only a claim the store can refute.
type advCheck struct {
	subType, subID string
	action         string
	resType, resID string
	tenant         string
	attrs          map[string]any
}

// malformed names what makes the check a client's error (400): a missing
// field, a reserved character, an ID the store cannot hold.
func (c advCheck) malformed() string {
	for _, f := range []struct{ name, v string }{{"subject.type", c.subType}, {"subject.id", c.subID}, {"action", c.action}, {"resource.type", c.resType}} {
		if f.v == "" {
			return f.name + " is missing"
		}
	}
	for _, v := range []string{c.subType, c.subID, c.action, c.resType, c.resID, c.tenant} {
		if len(v) > 256 || strings.ContainsAny(v, "#@ \t\n") {
			return fmt.Sprintf("%q is too long or holds a reserved character", v)
		}
	}
	for _, v := range []string{c.subID, c.resID, c.tenant} {
		if v != "" && !advValidID(v) {
			return fmt.Sprintf("%q is not a valid ID", v)
		}
	}
	return ""
}

// decide applies the documented rules to a check.
func (w *advWorld) decide(c advCheck) advVerdict {
	r := w.rules
	if m := c.malformed(); m != "" {
		return advDeny("malformed: %s", m)
	}
	// The store's tenant wins: a claim of another tenant is denied.
	var stored []string
	if c.resID != "" {
		stored = w.storedTenants(c.resType, c.resID)
	}
	tenant := c.tenant
	if tenant != "" && len(stored) > 0 && !slices.Contains(stored, tenant) {
		return advDeny("tenant_mismatch: claimed %q, stored %v", tenant, stored)
	}
	// A type that requires a tenant denies a resource that has none.
	if t := r.types[c.resType]; c.resID != "" && len(stored) == 0 && t != nil && t.required {
		return advDeny("no_tenant: %s:%s has no tenant, own or inherited", c.resType, c.resID)
	}
	if tenant == "" && len(stored) == 1 {
		tenant = stored[0]
	}
	// ABAC conditions deny whatever else grants.
	for _, cond := range r.conditions {
		if cond.Type == c.resType && slices.Contains(cond.Actions, c.action) && advJSONEqual(c.attrs[cond.Attribute], cond.Value) {
			return advDeny("condition %s", cond.Reason)
		}
	}
	sub := advSubject{typ: c.subType, id: c.subID}
	// RBAC: a role of the subject in the tenant grants type:action or type:*.
	if tenant != "" {
		for _, role := range w.roles(sub, tenant) {
			for _, g := range r.grants[role] {
				if g == c.resType+":"+c.action || g == c.resType+":*" {
					return advVerdict{allow: true, why: fmt.Sprintf("rbac: %s is %s of %s, %s", sub, role, tenant, g)}
				}
			}
		}
	}
	// ReBAC: the permission named by the action (a permission, not a
	// relation) holds on the resource.
	if t := r.types[c.resType]; c.resID != "" && t != nil && t.perms[c.action] != nil {
		if w.has(c.resType, c.resID, c.action, sub, map[string]bool{}) {
			return advVerdict{allow: true, why: fmt.Sprintf("rebac: %s has %s on %s:%s", sub, c.action, c.resType, c.resID)}
		}
	}
	return advDeny("no grant (tenant %q)", tenant)
}

func advJSONEqual(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// advProxied is a proxied request as the decision server receives it
// (after the transport: an HTTP server trims header values and joins
// repeated ones with ",").
type advProxied struct {
	method  string
	path    string            // the request path with its query
	headers map[string]string // keys as received (Envoy and Go lower-case them)
	// jwts are the payloads of the JWTs Envoy's jwt_authn verified, the
	// entries of the request's jwt_authn metadata; nil when none came.
	jwts []map[string]any
	// trustedHeader is the subject header the server's policy trusts, ""
	// for none (data.nexus.subject_header).
	trustedHeader string
}

// decideProxied applies the documented rules to a proxied request.
func (w *advWorld) decideProxied(p advProxied) advVerdict {
	r := w.rules
	// The path as opa-envoy-plugin parses it: the part before "?",
	// percent-decoded, leading slashes trimmed, split at "/"; the query
	// must parse (a ";" is an error, never a separator).
	rawPath, rawQuery, _ := strings.Cut(p.path, "?")
	decoded, err := url.PathUnescape(rawPath)
	if err != nil {
		return advDeny("path does not decode")
	}
	if _, err := url.ParseQuery(rawQuery); err != nil {
		return advDeny("query does not parse")
	}
	segs := strings.Split(strings.TrimLeft(decoded, "/"), "/")
	// The first route rule in data order whose method (or "*") and path
	// match; "*", "{id}" and "{tenant}" match any one segment.
	var route *advRoute
	var pattern []string
	for i := range r.routes {
		rt := &r.routes[i]
		pat := strings.Split(strings.TrimPrefix(rt.Path, "/"), "/")
		if (rt.Method != p.method && rt.Method != "*") || len(pat) != len(segs) {
			continue
		}
		ok := true
		for j, ps := range pat {
			if ps != "*" && ps != "{id}" && ps != "{tenant}" && ps != segs[j] {
				ok = false
				break
			}
		}
		if ok {
			route, pattern = rt, pat
			break
		}
	}
	if route == nil {
		return advDeny("no route for %s %v", p.method, segs)
	}
	// The subject: a verified JWT's sub; the trusted header only when no
	// JWT came. Two JWTs naming different subjects name none.
	var subject string
	if len(p.jwts) > 0 {
		var subs []any
		for _, payload := range p.jwts {
			if s, ok := payload["sub"]; ok && !slices.Contains(subs, s) {
				subs = append(subs, s)
			}
		}
		if len(subs) != 1 {
			return advDeny("JWTs name %d subjects", len(subs))
		}
		s, ok := subs[0].(string)
		if !ok {
			return advDeny("JWT sub %v is not a string", subs[0])
		}
		subject = s
	} else {
		v, ok := p.headers[p.trustedHeader]
		if p.trustedHeader == "" || !ok {
			return advDeny("no subject")
		}
		subject = v
	}
	if !advValidID(subject) {
		return advDeny("invalid subject %q", subject)
	}
	var tenant, id string
	fromPath := false
	for j, ps := range pattern {
		switch ps {
		case "{tenant}":
			tenant, fromPath = segs[j], true
		case "{id}":
			id = segs[j]
		}
	}
	if !fromPath {
		tenant = p.headers[r.tenantHeader]
	}
	if tenant != "" && !advValidSegmentID(tenant) {
		return advDeny("invalid tenant %q", tenant)
	}
	if slices.Contains(pattern, "{id}") && !advValidSegmentID(id) {
		return advDeny("invalid resource id %q", id)
	}
	return w.decide(advCheck{subType: "user", subID: subject, action: route.Action, resType: route.Type, resID: id, tenant: tenant})
}
