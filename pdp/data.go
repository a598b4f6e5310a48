package pdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/nexuspdp/nexus/datastore"
)

// PolicyData is the data a policy is loaded with: data plus the schema's
// roles and permissions, the route rules' split paths and their index.
func PolicyData(data []byte, sc *datastore.Schema) ([]byte, error) {
	d, _, err := withSchema(data, sc)
	return d, err
}

// withSchema returns data with data.nexus.roles (role to grants) and
// data.nexus.permissions (type to permission names) from sc, and each
// route rule of data.nexus.routes with its path split into "segments".
func withSchema(data []byte, sc *datastore.Schema) ([]byte, map[string]bool, error) {
	doc := map[string]any{}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return nil, nil, fmt.Errorf("pdp: policy data: %w", err)
		}
	}
	nx, _ := doc["nexus"].(map[string]any)
	if routes, ok := nx["routes"].([]any); ok {
		// Split each route's path once here rather than in every evaluation.
		for _, r := range routes {
			if m, ok := r.(map[string]any); ok {
				if p, ok := m["path"].(string); ok {
					if _, has := m["segments"]; !has {
						m["segments"] = strings.Split(strings.TrimPrefix(p, "/"), "/")
					}
				}
			}
		}
		if _, has := nx["route_index"]; !has {
			if idx, ok := routeIndex(routes); ok {
				nx["route_index"] = idx
			}
		}
	}
	if sc == nil {
		out, err := json.Marshal(doc)
		return out, nil, err
	}
	if nx == nil {
		nx = map[string]any{}
		doc["nexus"] = nx
	}
	nx["roles"] = sc.RoleGrantsMap()
	perms := map[string][]string{}
	types := map[string]bool{}
	for _, t := range sc.Types() {
		types[t] = true
		perms[t] = append([]string{}, sc.Permissions(t)...)
	}
	nx["permissions"] = perms
	// The types whose resources the store can assign to a tenant (a
	// "tenant" relation to the tenant type): for those, the default policy
	// reads the resource's tenant from the store and lets it win over the
	// tenant a request claims.
	if tt := sc.TenantType(); tt != "" {
		nx["tenant_type"] = tt
		tenanted := map[string]bool{}
		for _, t := range sc.Types() {
			if slices.Contains(sc.Relations(t), "tenant") && slices.ContainsFunc(sc.AllowedSubjects(t, "tenant"), func(st datastore.SubjectType) bool {
				return st.Type == tt && st.Relation == ""
			}) {
				tenanted[t] = true
			}
		}
		nx["tenanted"] = tenanted
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("pdp: policy data: %w", err)
	}
	return out, types, nil
}

// routeIndex lists the positions of the route rules by the number of
// segments of their path and by method ("*" included), in data order, so
// that the default policy matches a request against its candidates only.
// It gives up (false) on a rule without a string method and segments.
func routeIndex(routes []any) ([]map[string][]int, bool) {
	var idx []map[string][]int
	for i, r := range routes {
		m, _ := r.(map[string]any)
		method, ok := m["method"].(string)
		if !ok {
			return nil, false
		}
		var n int
		switch segs := m["segments"].(type) {
		case []string:
			n = len(segs)
		case []any:
			n = len(segs)
		default:
			return nil, false
		}
		for len(idx) <= n {
			idx = append(idx, map[string][]int{})
		}
		idx[n][method] = append(idx[n][method], i)
	}
	return idx, true
}

// Route is a route rule of the policy's data (data.nexus.routes): a
// request whose method and path match it is an action on a resource type.
// Method is a method or "*"; Path's segments are literal, or "{id}" (the
// resource's id), "{tenant}" (its tenant) or "*" (any one segment).
type Route struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Action string `json:"action"`
	Type   string `json:"type"`
}

// routeRules reads data.nexus.routes; a rule lacking a string method,
// path, action or type is left out.
func routeRules(data []byte) []Route {
	var doc struct {
		Nexus struct {
			Routes []json.RawMessage `json:"routes"`
		} `json:"nexus"`
	}
	if json.Unmarshal(data, &doc) != nil {
		return nil
	}
	var out []Route
	for _, raw := range doc.Nexus.Routes {
		var r Route
		if json.Unmarshal(raw, &r) == nil && r.Method != "" && r.Path != "" && r.Action != "" && r.Type != "" {
			out = append(out, r)
		}
	}
	return out
}
