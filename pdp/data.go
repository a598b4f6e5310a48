package pdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nexuspdp/nexus/datastore/builtins"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/internal/datadoc"
)

// PolicyData is the data a policy is loaded with: data plus the schema's
// roles and permissions, the route rules' split paths and their route
// table. Route rules that are not well formed are ErrBadPolicyData.
func PolicyData(data []byte, sc *schema.Schema) ([]byte, error) {
	d, err := withSchema(data, sc)
	return d.data, err
}

// loadData is a policy's data as the server loads it (withSchema).
type loadData struct {
	data  []byte
	types map[string]bool // the schema's types; nil without a schema
	table *builtins.Table // the route rules and conditions; nil without data.nexus
	// subjectHeader and tenantHeader are data.nexus.subject_header and
	// data.nexus.tenant_header ("" when unset); headersOK is false when
	// one is set to something other than a string.
	subjectHeader, tenantHeader string
	headersOK                   bool
}

// withSchema returns data with data.nexus.roles (role to grants) and
// data.nexus.permissions (type to permission names) from sc, each route
// rule of data.nexus.routes with its path split into "segments", and the
// rules as the route table nexus.route reads (data.nexus.route_table).
//
// Only data.nexus is decoded: the rest of the document is copied as it is,
// once, so a large data.json is never held decoded.
func withSchema(data []byte, sc *schema.Schema) (loadData, error) {
	var ld loadData
	raw, _, err := datadoc.Member(data, "nexus")
	if err != nil {
		return ld, fmt.Errorf("%w: %w", ErrBadPolicyData, err)
	}
	var nx map[string]any
	if raw != nil {
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return ld, fmt.Errorf("%w: data.nexus: %w", ErrBadPolicyData, err)
		}
		nx, _ = v.(map[string]any)
	}
	changed := false
	if nx != nil {
		table, text, err := routeTable(nx)
		if err != nil {
			return ld, err
		}
		ld.table = table
		nx["route_table"] = string(text)
		changed = true
	}
	ld.headersOK = true
	for k, dst := range map[string]*string{"subject_header": &ld.subjectHeader, "tenant_header": &ld.tenantHeader} {
		if v, ok := nx[k]; ok {
			s, isString := v.(string)
			*dst, ld.headersOK = s, ld.headersOK && isString
		}
	}
	if sc != nil {
		if nx == nil {
			nx = map[string]any{}
		}
		changed = true
		nx["roles"] = sc.RoleGrantsMap()
		perms := map[string][]string{}
		types := map[string]bool{}
		for _, t := range sc.Types() {
			types[t] = true
			perms[t] = append([]string{}, sc.Permissions(t)...)
		}
		nx["permissions"] = perms
		// The types whose resources the store can assign to a tenant (a
		// "tenant" relation to the tenant type): for those, the default
		// policy reads the resource's tenant from the store and lets it win
		// over the tenant a request claims.
		if tt := sc.TenantType(); tt != "" {
			nx["tenant_type"] = tt
			tenanted := map[string]bool{}
			for _, t := range sc.Types() {
				if sc.Tenanted(t) {
					tenanted[t] = true
				}
			}
			nx["tenanted"] = tenanted
			// How the types' resources without a tenant of their own inherit
			// one, and whether they must have one (the schema's tenancy).
			tenancy := map[string]any{}
			for _, t := range sc.Types() {
				if tn := sc.Tenancy(t); tn.Required || len(tn.Inherit) > 0 {
					tenancy[t] = map[string]any{"inherit": append([]string{}, tn.Inherit...), "required": tn.Required}
				}
			}
			nx["tenancy"] = tenancy
		}
		ld.types = types
	}
	if !changed {
		ld.data = data
		if len(bytes.TrimSpace(data)) == 0 {
			ld.data = []byte("{}")
		}
		return ld, nil
	}
	text, err := json.Marshal(nx)
	if err != nil {
		return ld, fmt.Errorf("pdp: policy data: %w", err)
	}
	if ld.data, err = datadoc.Replace(data, "nexus", text); err != nil {
		return ld, fmt.Errorf("pdp: policy data: %w", err)
	}
	return ld, nil
}

// routeTable checks the route rules (data.nexus.routes) and the ABAC
// conditions (data.nexus.conditions) and writes them as the table
// nexus.envoy_decide reads. Every rule is an object with a string method,
// action and type and a path (or its "segments"), with at most one "{id}"
// and one "{tenant}" segment; every condition an object with a string
// type, attribute and reason, actions (strings) and a value: data that is
// not is an error, not a rule that silently never matches.
func routeTable(nx map[string]any) (*builtins.Table, []byte, error) {
	var t builtins.Table
	if c, ok := nx["conditions"]; ok {
		raw, err := json.Marshal(c)
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			err = dec.Decode(&t.Conditions)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: data.nexus.conditions is not a list of conditions (type, actions, attribute, value, reason): %v", ErrBadPolicyData, err)
		}
		list, _ := c.([]any) // an array, or null: it decoded as one
		for i, c := range list {
			m, _ := c.(map[string]any)
			for _, k := range []string{"type", "actions", "attribute", "value", "reason"} {
				if _, ok := m[k]; !ok {
					return nil, nil, fmt.Errorf("%w: condition %d has no %q", ErrBadPolicyData, i, k)
				}
			}
		}
	}
	routes, ok := nx["routes"]
	if !ok {
		text, err := builtins.AppendTable(nil, t)
		return &t, text, err
	}
	list, ok := routes.([]any)
	if !ok {
		return nil, nil, fmt.Errorf("%w: data.nexus.routes is not an array of route rules", ErrBadPolicyData)
	}
	t.Routes = make([]builtins.RouteRule, len(list))
	for i, r := range list {
		m, _ := r.(map[string]any)
		rule := &t.Routes[i]
		var okM, okA, okT bool
		rule.Method, okM = m["method"].(string)
		rule.Action, okA = m["action"].(string)
		rule.Type, okT = m["type"].(string)
		if !okM || !okA || !okT || rule.Method == "" || rule.Action == "" || rule.Type == "" {
			return nil, nil, fmt.Errorf("%w: route rule %d needs a method, an action and a type (strings): %v", ErrBadPolicyData, i, r)
		}
		switch segs := m["segments"].(type) {
		case nil:
			p, ok := m["path"].(string)
			if !ok {
				return nil, nil, fmt.Errorf("%w: route rule %d needs a path (a string): %v", ErrBadPolicyData, i, r)
			}
			rule.Segments = strings.Split(strings.TrimPrefix(p, "/"), "/")
			m["segments"] = rule.Segments
		case []any:
			for _, s := range segs {
				str, ok := s.(string)
				if !ok {
					return nil, nil, fmt.Errorf("%w: route rule %d: its segments are not strings: %v", ErrBadPolicyData, i, r)
				}
				rule.Segments = append(rule.Segments, str)
			}
		default:
			return nil, nil, fmt.Errorf("%w: route rule %d: its segments are not strings: %v", ErrBadPolicyData, i, r)
		}
		if countOf(rule.Segments, "{id}") > 1 || countOf(rule.Segments, "{tenant}") > 1 {
			return nil, nil, fmt.Errorf("%w: route rule %d names \"{id}\" or \"{tenant}\" twice: %v", ErrBadPolicyData, i, r)
		}
	}
	text, err := builtins.AppendTable(nil, t)
	return &t, text, err
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
