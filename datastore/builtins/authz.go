package builtins

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
)

// The builtins of this file answer the parts of a check that the default
// policy used to compute in Rego (route matching, the resource's tenant,
// RBAC and ReBAC), in one host call each. Their Rego definitions are kept
// as the specification they are tested against (package
// defaults/reference).

// The segments of a route rule that name the resource and its tenant.
const (
	idSegment     = "{id}"
	tenantSegment = "{tenant}"
)

// RouteRule is one rule of a route table: a request whose method is
// Method (or Method is "*") and whose path has as many segments as
// Segments, each equal to its pattern or matched by "*", "{id}" or
// "{tenant}", is Action on a resource of Type.
type RouteRule struct {
	Method, Action, Type string
	Segments             []string
}

// Condition is an ABAC condition of the default policy's data
// (data.nexus.conditions): Action in Actions on a resource of Type whose
// attribute Attribute equals Value is denied, with Reason.
type Condition struct {
	Type      string   `json:"type"`
	Actions   []string `json:"actions"`
	Attribute string   `json:"attribute"`
	Value     any      `json:"value"`
	Reason    string   `json:"reason"`
}

// AppliesTo reports whether the condition applies to action on a resource
// of type typ.
func (c *Condition) AppliesTo(typ, action string) bool {
	return c.Type == typ && slices.Contains(c.Actions, action)
}

// Table is what nexus.envoy_decide reads of the default policy's data:
// the route rules, in order, and the ABAC conditions.
type Table struct {
	Routes     []RouteRule
	Conditions []Condition
}

// AppendTable appends t as the JSON text nexus.envoy_decide reads:
// {"routes": [[method, action, type, [segment, ...]], ...], "conditions":
// [...]}.
func AppendTable(dst []byte, t Table) ([]byte, error) {
	routes := make([][4]any, len(t.Routes))
	for i, r := range t.Routes {
		routes[i] = [4]any{r.Method, r.Action, r.Type, r.Segments}
	}
	conds := t.Conditions
	if conds == nil {
		conds = []Condition{}
	}
	b, err := json.Marshal(map[string]any{"routes": routes, "conditions": conds})
	if err != nil {
		return dst, fmt.Errorf("builtins: route table: %w", err)
	}
	return append(dst, b...), nil
}

// parseTable reads a table AppendTable wrote, or one a policy wrote with
// json.marshal. A route rule whose method, action or type is not a
// string, or whose segments are not strings, is left out: it can match
// nothing. (The server refuses such data when it loads a policy.)
func parseTable(table string) (*Table, error) {
	var raw struct {
		Routes     [][]json.RawMessage `json:"routes"`
		Conditions []json.RawMessage   `json:"conditions"`
	}
	if err := json.Unmarshal([]byte(table), &raw); err != nil {
		return nil, fmt.Errorf("nexus.envoy_decide: the route table is not valid: %w", err)
	}
	t := &Table{Routes: make([]RouteRule, 0, len(raw.Routes))}
	for _, r := range raw.Routes {
		var rule RouteRule
		if len(r) != 4 ||
			json.Unmarshal(r[0], &rule.Method) != nil ||
			json.Unmarshal(r[1], &rule.Action) != nil ||
			json.Unmarshal(r[2], &rule.Type) != nil ||
			json.Unmarshal(r[3], &rule.Segments) != nil ||
			rule.Segments == nil {
			continue
		}
		t.Routes = append(t.Routes, rule)
	}
	for _, c := range raw.Conditions {
		var cond Condition
		if json.Unmarshal(c, &cond) != nil {
			continue
		}
		t.Conditions = append(t.Conditions, cond)
	}
	return t, nil
}

// parsedTable is the last table read, kept so that a policy's table is
// parsed once, not on every check.
type parsedTable struct {
	text  string
	table *Table
}

var lastTable atomic.Pointer[parsedTable]

func tableOf(text string) (*Table, error) {
	if t := lastTable.Load(); t != nil && t.text == text {
		return t.table, nil
	}
	t, err := parseTable(text)
	if err != nil {
		return nil, err
	}
	lastTable.Store(&parsedTable{text: strings.Clone(text), table: t})
	return t, nil
}

// matched is the route rule a request matched and its captures.
type matched struct {
	rule       *RouteRule
	id, tenant capture
}

// Match finds the first rule of t that matches method and the path's
// segments, and the segments under its "{id}" and "{tenant}" ("" for a
// rule without one). A rule naming "{id}" or "{tenant}" twice with
// different values matches nothing (the server refuses such rules when it
// loads a policy).
func (t *Table) Match(method string, segs []string) (r RouteRule, id, tenant string, ok bool) {
	m, ok, err := t.route(method, segs)
	if err != nil || !ok {
		return RouteRule{}, "", "", false
	}
	return *m.rule, m.id.value, m.tenant.value, true
}

// route finds the first rule of t that matches method and the path's
// segments. A rule with two "{id}" (or "{tenant}") segments whose values
// differ is an error: the request names two resources.
func (t *Table) route(method string, segs []string) (matched, bool, error) {
	for i := range t.Routes {
		r := &t.Routes[i]
		if (r.Method != method && r.Method != "*") || len(r.Segments) != len(segs) {
			continue
		}
		m := matched{rule: r}
		ok := true
		for j, p := range r.Segments {
			switch p {
			case "*":
			case idSegment:
				if err := m.id.set(p, segs[j]); err != nil {
					return m, false, err
				}
			case tenantSegment:
				if err := m.tenant.set(p, segs[j]); err != nil {
					return m, false, err
				}
			default:
				ok = p == segs[j]
			}
			if !ok {
				break
			}
		}
		if ok {
			return m, true, nil
		}
	}
	return matched{}, false, nil
}

type capture struct {
	value string
	found bool
}

func (c *capture) set(pattern, seg string) error {
	if c.found && c.value != seg {
		return fmt.Errorf("nexus.route: the rule's %s segments name %q and %q", pattern, c.value, seg)
	}
	c.value, c.found = seg, true
	return nil
}

// Results of nexus.resource_tenant.
const (
	tenantMismatch = "mismatch"
	tenantNone     = "none"
	tenantOK       = "ok"
)

// verdict is what tenantOf finds of a resource's tenant.
type verdict uint8

const (
	verdictOK       verdict = iota // judged in the tenant tenantOf returns
	verdictMismatch                // the request claims a tenant the resource is not in
	verdictNone                    // the type requires a tenant; the resource has none
)

// maxTenantDepth bounds the walk up a resource's ancestors for the tenant
// it inherits: an ancestor further than this many steps up, reached
// through ancestors without a tenant, is an error (ErrTenantDepth).
const maxTenantDepth = 32

// schemaStore is what nexus.resource_tenant and nexus.grant read besides
// Store's methods.
type schemaStore interface {
	Schema(ctx context.Context) (*datastore.Schema, error)
}

// storeView is what the tenant and grant decisions read of the store: its
// schema, the subjects of an object's relation, a subject's roles in a
// tenant, and a check. A *datastore.View is one (one snapshot for all of
// a decision's reads); storeMethods makes one of any Store.
type storeView interface {
	Schema() *datastore.Schema
	AppendSubjects(dst []api.Subject, object api.Object, relation string) ([]api.Subject, error)
	AppendRoles(dst []string, subject api.Subject, tenant string) ([]string, error)
	Check(req datastore.CheckRequest) (datastore.CheckResult, error)
}

// withView calls fn with a storeView of s: a View when s is a
// *datastore.BoltStore, else s's own methods, one call at a time.
func withView(ctx context.Context, s Store, fn func(l storeView) error) error {
	if b, ok := s.(*datastore.BoltStore); ok {
		return b.View(ctx, func(v *datastore.View) error { return fn(v) })
	}
	return fn(storeMethods{ctx, s})
}

// storeMethods is a storeView through a Store's methods.
type storeMethods struct {
	ctx context.Context
	s   Store
}

func (l storeMethods) Schema() *datastore.Schema { return schemaOf(l.ctx, l.s) }

func (l storeMethods) AppendSubjects(dst []api.Subject, object api.Object, relation string) ([]api.Subject, error) {
	ts, err := l.s.Read(l.ctx, datastore.Filter{ObjectType: object.Type, ObjectID: object.ID, Relation: relation})
	for _, t := range ts {
		dst = append(dst, t.Subject)
	}
	return dst, err
}

func (l storeMethods) AppendRoles(dst []string, subject api.Subject, tenant string) ([]string, error) {
	return l.s.AppendRoles(l.ctx, dst, subject, tenant)
}

func (l storeMethods) Check(req datastore.CheckRequest) (datastore.CheckResult, error) {
	return l.s.Check(l.ctx, req)
}

// ResourceTenant is nexus.resource_tenant(object, claimed): the tenant a
// check on object ("type:id") is judged in. The store's tenants of object
// are those of its "tenant" relation, for a type the schema gives one to
// the tenant type; a resource with none inherits those of the objects its
// type's tenancy.inherit relations lead to (nearest first, see tenantOf).
// A claimed tenant ("" for none) that the store does not hold, when it
// holds one, appends ["mismatch"]; a resource of a type whose tenancy is
// required that has no tenant appends ["none"]; otherwise ["ok", T] where
// T is the claimed tenant, else the store's only one, else "".
func ResourceTenant(ctx context.Context, s Store, dst []string, object, claimed string) ([]string, error) {
	typ, id, _ := strings.Cut(object, ":")
	var v verdict
	var tenant string
	err := withView(ctx, s, func(l storeView) (err error) {
		v, tenant, err = tenantOf(l, typ, id, claimed)
		return err
	})
	switch {
	case err != nil:
		return dst, fmt.Errorf("nexus.resource_tenant: %w", err)
	case v == verdictMismatch:
		return append(dst, tenantMismatch), nil
	case v == verdictNone:
		return append(dst, tenantNone), nil
	}
	return append(dst, tenantOK, tenant), nil
}

// tenantOf is ResourceTenant for the object typ:id (id "" when the
// object string has none): the verdict and, when it is verdictOK, the
// tenant (a copy, which outlives the view).
//
// The resource's tenants are its own; without any, those of the objects
// its type's tenancy.inherit relations lead to, each with its own tenants
// or, without any, those it inherits in turn: breadth first, every object
// read once (a cycle ends), an object more than maxTenantDepth steps up
// an error. A resource named without an ID has no tenant and is judged in
// the claimed one.
func tenantOf(l storeView, typ, id, claimed string) (verdict, string, error) {
	sc := l.Schema()
	if id == "" || sc == nil {
		return verdictOK, claimed, nil
	}
	info := tenancyOf(sc, typ)
	if !info.tenanted && len(info.inherit) == 0 {
		return verdictOK, claimed, nil
	}
	if !api.ValidID(id) {
		_, err := api.ParseObject(typ + ":" + id)
		return verdictOK, "", err
	}
	ts := tenantSet{claimed: claimed}
	obj := api.Object{Type: typ, ID: id}
	if _, err := ts.own(l, sc, info, obj); err != nil {
		return verdictOK, "", err
	}
	if ts.n == 0 && len(info.inherit) > 0 {
		if err := ts.inherited(l, sc, obj); err != nil {
			return verdictOK, "", err
		}
	}
	switch {
	case claimed != "" && ts.n > 0 && !ts.found:
		return verdictMismatch, "", nil
	case ts.n == 0 && info.required:
		return verdictNone, "", nil
	case claimed != "":
		return verdictOK, claimed, nil
	case ts.n == 1:
		// Copied: first may point into a View's snapshot, which the
		// tenant must not outlive.
		return verdictOK, strings.Clone(ts.first), nil
	}
	return verdictOK, "", nil
}

// tenantSet gathers the distinct tenants a resource is in.
type tenantSet struct {
	claimed string
	n       int    // distinct tenants, counted up to 2
	first   string // the first
	found   bool   // claimed is one of them
}

// own adds obj's own tenants (the tenant-type subjects of its "tenant"
// relation, "id#relation" for a userset) when its type has them, and
// reports whether it has any.
func (ts *tenantSet) own(l storeView, sc *datastore.Schema, info typeTenancy, obj api.Object) (bool, error) {
	if !info.tenanted {
		return false, nil
	}
	var subs []api.Subject
	var err error
	if v, ok := l.(*datastore.View); ok {
		// Called on the View itself: buf does not escape through
		// the interface.
		var buf [4]api.Subject
		subs, err = v.AppendSubjects(buf[:0], obj, "tenant")
	} else {
		subs, err = l.AppendSubjects(nil, obj, "tenant")
	}
	if err != nil {
		return false, err
	}
	tt := sc.TenantType()
	has := false
	for _, sub := range subs {
		if sub.Type != tt {
			continue
		}
		has = true
		t := sub.ID
		if sub.Relation != "" {
			t = sub.ID + "#" + sub.Relation
		}
		if t == ts.claimed {
			ts.found = true
		}
		switch {
		case ts.n == 0:
			ts.first, ts.n = t, 1
		case ts.n == 1 && t != ts.first:
			ts.n = 2
		}
	}
	return has, nil
}

// inherited adds the tenants obj, which has none of its own, inherits:
// level by level up the tenancy.inherit relations, the own tenants of
// every object first reached at that level, and the objects without any
// carried to the next.
func (ts *tenantSet) inherited(l storeView, sc *datastore.Schema, obj api.Object) error {
	seen := map[api.Object]bool{obj: true}
	level := []api.Object{obj}
	for depth := 1; len(level) > 0; depth++ {
		var next []api.Object
		for _, o := range level {
			for _, rel := range tenancyOf(sc, o.Type).inherit {
				subs, err := l.AppendSubjects(nil, o, rel)
				if err != nil {
					return err
				}
				for _, sub := range subs {
					p := api.Object{Type: sub.Type, ID: sub.ID}
					if sub.Relation != "" || seen[p] {
						continue
					}
					if depth > maxTenantDepth {
						return fmt.Errorf("%w: %s:%s", ErrTenantDepth, obj.Type, obj.ID)
					}
					seen[p] = true
					has, err := ts.own(l, sc, tenancyOf(sc, p.Type), p)
					if err != nil {
						return err
					}
					if !has {
						next = append(next, p)
					}
				}
			}
		}
		level = next
	}
	return nil
}

// schemaOf is the store's schema, nil without one (or for a store that
// does not say).
func schemaOf(ctx context.Context, s Store) *datastore.Schema {
	ss, ok := s.(schemaStore)
	if !ok {
		return nil
	}
	sc, err := ss.Schema(ctx)
	if err != nil {
		return nil
	}
	return sc
}

// typeTenancy is how a type's resources get their tenant: their own
// (tenanted: a "tenant" relation whose subjects are of the tenant type),
// else through the inherit relations; required as the schema's Tenancy.
type typeTenancy struct {
	tenanted bool
	inherit  []string
	required bool
}

// tenancyOf is typ's typeTenancy in sc (the zero one for an unknown type).
func tenancyOf(sc *datastore.Schema, typ string) typeTenancy {
	tn := sc.TenancyOf(typ)
	return typeTenancy{tenanted: sc.Tenanted(typ), inherit: tn.Inherit, required: tn.Required}
}

// Grant is nexus.grant(subject, action, object, tenant): why subject may
// do action on object ("type:id"), as ["rbac"] when one of its roles in
// tenant (none if "") grants "type:action" or "type:*", else ["rebac"]
// when object has an ID, action is one of its type's permissions and the
// store grants it; nothing appended when neither does. A subject that is
// not "type:id" or "type:id#relation" is an error when it is read.
func Grant(ctx context.Context, s Store, dst []string, subject, action, object, tenant string) ([]string, error) {
	typ, id, _ := strings.Cut(object, ":")
	sub, bad := api.ParseSubject(subject)
	var g string
	err := withView(ctx, s, func(l storeView) (err error) {
		g, err = grantOf(l, sub, bad, action, typ, id, tenant)
		return err
	})
	if err != nil {
		return dst, fmt.Errorf("nexus.grant: %w", err)
	}
	if g == "" {
		return dst, nil
	}
	return append(dst, g), nil
}

// grantOf is Grant for the subject sub, whose string did not parse when
// bad is not nil (then reading the subject fails with bad), and the
// object typ:id (id "" when the object string has none): "rbac", "rebac"
// or "".
func grantOf(l storeView, sub api.Subject, bad error, action, typ, id, tenant string) (string, error) {
	sc := l.Schema()
	if tenant != "" {
		if bad != nil {
			return "", bad
		}
		var roles []string
		var err error
		if v, ok := l.(*datastore.View); ok {
			var buf [8]string // as in tenantOf
			roles, err = v.AppendRoles(buf[:0], sub, tenant)
		} else {
			roles, err = l.AppendRoles(nil, sub, tenant)
		}
		if err != nil {
			return "", err
		}
		if sc != nil {
			for _, role := range roles {
				if sc.RoleGrantsOn(role, typ, action) {
					return "rbac", nil
				}
			}
		}
	}
	if id == "" || sc == nil || !sc.HasPermission(typ, action) {
		return "", nil
	}
	if bad != nil {
		return "", bad
	}
	res, err := l.Check(datastore.CheckRequest{Object: api.Object{Type: typ, ID: id}, Permission: action, Subject: sub})
	if err != nil {
		return "", err
	}
	if res.Allowed {
		return "rebac", nil
	}
	return "", nil
}

// reader answers a decision's questions from one storeView, reading the
// resource typ:id and the subject subType:subID as nexus.resource_tenant
// and nexus.grant read the strings the default policy joins them into.
type reader struct {
	l storeView
}

// object is typ:id cut as ResourceTenant and Grant cut "typ:id": at its
// first ':'.
func object(typ, id string) (string, string) {
	if strings.IndexByte(typ, ':') < 0 {
		return typ, id
	}
	typ, id, _ = strings.Cut(typ+":"+id, ":")
	return typ, id
}

// resourceTenant is ResourceTenant for typ:id: the verdict, and the
// tenant when it is verdictOK.
// The decision asks for subType:subID's grant next; when that will read
// the subject's roles (a tenant claimed, or a type assigned to tenants)
// and r reads a View, the resource's and the subject's tuples are read
// first, together (datastore.View.Preload).
func (r reader) resourceTenant(subType, subID, typ, id, claimed string) (vd verdict, tenant string, err error) {
	typ, id = object(typ, id)
	if v, ok := r.l.(*datastore.View); ok {
		if sc := v.Schema(); sc != nil && (claimed != "" || tenancyOf(sc, typ).tenanted) {
			if err := v.Preload(api.Object{Type: typ, ID: id}, api.Subject{Type: subType, ID: subID}); err != nil {
				return verdictOK, "", fmt.Errorf("nexus.resource_tenant: %w", err)
			}
		}
	}
	vd, tenant, err = tenantOf(r.l, typ, id, claimed)
	if err != nil {
		return verdictOK, "", fmt.Errorf("nexus.resource_tenant: %w", err)
	}
	return vd, tenant, nil
}

// grant is Grant for subType:subID: "rbac", "rebac" or "" for no grant.
func (r reader) grant(subType, subID, action, typ, id, tenant string) (string, error) {
	typ, id = object(typ, id)
	// A valid type name and ID hold neither ':' nor '#': they are the
	// subject their string parses as. Others are parsed from it.
	sub, bad := api.Subject{Type: subType, ID: subID}, error(nil)
	if !api.ValidName(subType) || !api.ValidID(subID) {
		sub, bad = api.ParseSubject(subType + ":" + subID)
	}
	g, err := grantOf(r.l, sub, bad, action, typ, id, tenant)
	if err != nil {
		return "", fmt.Errorf("nexus.grant: %w", err)
	}
	return g, nil
}
