package extauthz

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// userPermissionsRequest is Permit's /user-permissions body.
type userPermissionsRequest struct {
	User          json.RawMessage `json:"user"`
	Tenants       []string        `json:"tenants"`
	Resources     []string        `json:"resources"`
	ResourceTypes []string        `json:"resource_types"`
	Context       map[string]any  `json:"context"`
}

type permissionsEntry struct {
	Tenant      map[string]string `json:"tenant,omitempty"`
	Resource    map[string]string `json:"resource,omitempty"`
	Permissions []string          `json:"permissions"`
	Roles       []string          `json:"roles,omitempty"`
}

// handleUserPermissions answers Permit's /user-permissions: for each of
// the user's tenants ("__tenant:<key>") the permissions its roles grant,
// and for each resource (those given, or those the user reaches through
// relationships) the permissions the policy allows, each confirmed by a
// check through the policy.
func (s *Server) handleUserPermissions(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req userPermissionsRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, errorf(checkapi.ErrBadRequest, "malformed JSON: %v", err))
		return
	}
	q := checkapi.PermitQuery{User: req.User, Action: "-", Resource: json.RawMessage(`"-:-"`)}
	userCheck, err := q.Check()
	if err != nil {
		writeError(w, err)
		return
	}
	user := api.Subject{Type: "user", ID: userCheck.Subject.ID}
	sc, err := s.cfg.Store.Schema(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	out := map[string]permissionsEntry{}

	tenants := req.Tenants
	if len(tenants) == 0 {
		ts, err := s.cfg.Store.Read(ctx, datastore.Filter{ObjectType: sc.TenantType(), SubjectType: "user", SubjectID: user.ID})
		if err != nil {
			writeError(w, err)
			return
		}
		for _, t := range ts {
			if !slices.Contains(tenants, t.Object.ID) {
				tenants = append(tenants, t.Object.ID)
			}
		}
	}
	for _, t := range tenants {
		roles, err := s.cfg.Store.AppendRoles(ctx, nil, user, t)
		if err != nil {
			writeError(w, err)
			return
		}
		if len(roles) == 0 {
			continue
		}
		var perms []string
		for _, role := range roles {
			for _, g := range sc.RoleGrants(role) {
				if !slices.Contains(perms, g) {
					perms = append(perms, g)
				}
			}
		}
		slices.Sort(perms)
		out["__tenant:"+t] = permissionsEntry{Tenant: map[string]string{"key": t}, Permissions: perms, Roles: roles}
	}

	resources := req.Resources
	if len(resources) == 0 {
		types := req.ResourceTypes
		if len(types) == 0 {
			types = sc.Types()
		}
		seen := map[string]bool{}
		for _, typ := range types {
			for _, perm := range sc.Permissions(typ) {
				ids, err := s.cfg.Store.LookupResources(ctx, user, perm, typ)
				if err != nil {
					writeError(w, err)
					return
				}
				for _, id := range ids {
					if k := typ + ":" + id; !seen[k] {
						seen[k] = true
						resources = append(resources, k)
					}
				}
			}
		}
		slices.Sort(resources)
	}
	if len(resources) > s.cfg.MaxBatch {
		writeError(w, errorf(checkapi.ErrBadRequest, "%d resources, at most %d in one request", len(resources), s.cfg.MaxBatch))
		return
	}
	for _, res := range resources {
		obj, err := api.ParseObject(res)
		if err != nil {
			writeError(w, errorf(checkapi.ErrBadRequest, "resources: %v", err))
			return
		}
		tenant := s.resourceTenant(r, obj)
		var perms []string
		for _, perm := range sc.Permissions(obj.Type) {
			c := checkapi.Check{Subject: checkapi.Subject{Type: "user", ID: user.ID}, Action: perm,
				Resource: checkapi.Resource{Type: obj.Type, ID: obj.ID, Tenant: tenant}, Context: req.Context}
			d, err := s.check(ctx, ifacePermit, &c)
			if err != nil {
				writeError(w, err)
				return
			}
			if d.Allowed {
				perms = append(perms, obj.Type+":"+perm)
			}
		}
		if len(perms) > 0 {
			e := permissionsEntry{Resource: map[string]string{"type": obj.Type, "key": obj.ID}, Permissions: perms}
			if tenant != "" {
				e.Tenant = map[string]string{"key": tenant}
			}
			out[res] = e
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// resourceTenant is the tenant a resource belongs to: the subject of its
// "tenant" relation, if the schema has one.
func (s *Server) resourceTenant(r *http.Request, obj api.Object) string {
	ts, err := s.cfg.Store.Read(r.Context(), datastore.Filter{ObjectType: obj.Type, ObjectID: obj.ID, Relation: "tenant", Limit: 1})
	if err != nil || len(ts) == 0 {
		return ""
	}
	return ts[0].Subject.ID
}

type authorizedUsersRequest struct {
	Action   string          `json:"action"`
	Resource json.RawMessage `json:"resource"`
	Context  map[string]any  `json:"context"`
}

type assignment struct {
	User     string `json:"user"`
	Tenant   string `json:"tenant,omitempty"`
	Resource string `json:"resource"`
	Role     string `json:"role"`
}

// handleAuthorizedUsers answers Permit's /authorized_users: the users who
// may do action on resource, through a tenant role or a relationship,
// each confirmed by a check through the policy.
func (s *Server) handleAuthorizedUsers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req authorizedUsersRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, errorf(checkapi.ErrBadRequest, "malformed JSON: %v", err))
		return
	}
	q := checkapi.PermitQuery{User: json.RawMessage(`"-"`), Action: req.Action, Resource: req.Resource}
	c, err := q.Check()
	if err != nil {
		writeError(w, err)
		return
	}
	sc, err := s.cfg.Store.Schema(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	if !s.p.knownType(c.Resource.Type) {
		writeError(w, errorf(errUnknownType, "resource.type %q is not a type of the schema", c.Resource.Type))
		return
	}
	obj := api.Object{Type: c.Resource.Type, ID: c.Resource.ID}
	if c.Resource.Tenant == "" && obj.ID != "" {
		c.Resource.Tenant = s.resourceTenant(r, obj)
	}
	candidates := map[string][]assignment{}
	if c.Resource.Tenant != "" {
		ts, err := s.cfg.Store.Read(ctx, datastore.Filter{ObjectType: sc.TenantType(), ObjectID: c.Resource.Tenant, SubjectType: "user"})
		if err != nil {
			writeError(w, err)
			return
		}
		for _, t := range ts {
			if sc.Grants([]string{t.Relation}, obj.Type, c.Action) {
				candidates[t.Subject.ID] = append(candidates[t.Subject.ID], assignment{User: t.Subject.ID, Tenant: c.Resource.Tenant, Resource: "__tenant:" + c.Resource.Tenant, Role: t.Relation})
			}
		}
	}
	if obj.ID != "" && slices.Contains(sc.Permissions(obj.Type), c.Action) {
		ids, err := s.cfg.Store.LookupSubjects(ctx, obj, c.Action, "user")
		if err != nil {
			writeError(w, err)
			return
		}
		for _, id := range ids {
			candidates[id] = append(candidates[id], assignment{User: id, Tenant: c.Resource.Tenant, Resource: obj.String(), Role: c.Action})
		}
	}
	if len(candidates) > s.cfg.MaxBatch {
		writeError(w, errorf(checkapi.ErrBadRequest, "%d candidate users, at most %d in one request", len(candidates), s.cfg.MaxBatch))
		return
	}
	users := map[string][]assignment{}
	for id, as := range candidates {
		uc := c
		uc.Subject = checkapi.Subject{Type: "user", ID: id}
		uc.Context = req.Context
		d, err := s.check(ctx, ifacePermit, &uc)
		if err != nil {
			writeError(w, err)
			return
		}
		if d.Allowed {
			users[id] = as
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"resource": strings.TrimSuffix(obj.String(), ":"),
		"tenant":   c.Resource.Tenant,
		"users":    users,
	})
}
