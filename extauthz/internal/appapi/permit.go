package appapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

func permitResponse(d pdp.Decision) checkapi.PermitResponse {
	resp := checkapi.PermitResponse{Allow: d.Allowed, Result: d.Allowed}
	if d.Reason != "" {
		resp.Debug = map[string]any{"reason": d.Reason}
	}
	return resp
}

func (s *API) handleAllowed(w http.ResponseWriter, r *http.Request) {
	c, ok := decodeBody(s, w, r, pdp.IfacePermit, checkapi.ReadPermit)
	if !ok {
		return
	}
	if err := s.atRevision(r.Context(), pdp.IfacePermit, &c); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	d, err := s.PDP.Check(r.Context(), pdp.IfacePermit, &c)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	writePermit(w, d)
}

func (s *API) handleAllowedBulk(w http.ResponseWriter, r *http.Request) {
	cs, ok := decodeBody(s, w, r, pdp.IfacePermit, func(rd io.Reader) ([]checkapi.Check, error) { return checkapi.ReadPermitBulk(rd, s.MaxBatch) })
	if !ok {
		return
	}
	ptrs := make([]*checkapi.Check, len(cs))
	for i := range cs {
		ptrs[i] = &cs[i]
	}
	if err := s.atRevision(r.Context(), pdp.IfacePermit, ptrs...); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	ctx, cancel := s.PDP.Budget(r.Context())
	defer cancel()
	resp := checkapi.PermitBulkResponse{Allow: make([]checkapi.PermitResponse, len(cs))}
	for i := range cs {
		d, err := s.PDP.Check(ctx, pdp.IfacePermit, &cs[i])
		if errors.Is(err, pdp.ErrBudgetExceeded) {
			wire.WriteError(s.Log, w, err) // the whole request, not one query
			return
		}
		if err != nil {
			code := pdp.Code(err)
			resp.Allow[i] = checkapi.PermitResponse{Debug: map[string]any{"error": wire.Describe(err), "reason": code}}
			continue
		}
		resp.Allow[i] = permitResponse(d)
	}
	wire.WriteJSON(w, http.StatusOK, resp)
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
// the user's tenants ("__tenant:<key>") the permissions its roles grant
// (concrete ones: a "file:*" grant lists every action on files),
// and for each resource (those given, or those the user reaches through
// relationships) the permissions the policy allows, each confirmed by a
// check through the policy.
func (s *API) handleUserPermissions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.PDP.Budget(r.Context())
	defer cancel()
	body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	var req userPermissionsRequest
	if err := wire.DecodeJSON(body, &req, false, ""); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	u, err := checkapi.PermitUser(req.User)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	user := api.Subject{Type: "user", ID: u.ID}
	sc, err := s.Store.Schema(ctx)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	out := map[string]permissionsEntry{}

	tenants := req.Tenants
	if len(tenants) == 0 {
		ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: sc.TenantType(), SubjectType: "user", SubjectID: user.ID})
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		for _, t := range ts {
			if !slices.Contains(tenants, t.Object.ID) {
				tenants = append(tenants, t.Object.ID)
			}
		}
	}
	for _, t := range tenants {
		roles, err := s.Store.AppendRoles(ctx, nil, user, t)
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		if len(roles) == 0 {
			continue
		}
		var perms []string
		for _, role := range roles {
			perms = append(perms, concreteGrants(sc, sc.RoleGrants(role))...)
		}
		slices.Sort(perms)
		perms = slices.Compact(perms)
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
				ids, err := s.Store.LookupResources(ctx, user, perm, typ)
				if err != nil {
					wire.WriteError(s.Log, w, err)
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
	if len(resources) > s.MaxBatch {
		sentinel := pdp.ErrBadRequest // the store's resources, not the client's
		if len(req.Resources) > 0 {
			sentinel = pdp.ErrTooLarge
		}
		wire.WriteError(s.Log, w, pdp.Errorf(sentinel, "%d resources, at most %d in one request", len(resources), s.MaxBatch))
		return
	}
	for _, res := range resources {
		obj, err := api.ParseObject(res)
		if err != nil {
			wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "resources: %v", err))
			return
		}
		tenant := s.resourceTenant(ctx, sc, obj)
		var perms []string
		for _, perm := range sc.Permissions(obj.Type) {
			c := checkapi.Check{Subject: checkapi.Subject{Type: "user", ID: user.ID}, Action: perm,
				Resource: checkapi.Resource{Type: obj.Type, ID: obj.ID, Tenant: tenant}, Context: req.Context}
			d, err := s.PDP.Check(ctx, pdp.IfacePermit, &c)
			if err != nil {
				wire.WriteError(s.Log, w, err)
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
	wire.WriteJSON(w, http.StatusOK, out)
}

// resourceTenant is the tenant the store assigns a resource to: its own
// (the subject of its "tenant" relation), else the one it inherits up its
// type's tenancy relations ("" for none, several, or a failed read: the
// policy's check, which reads it again, decides).
func (s *API) resourceTenant(ctx context.Context, _ *schema.Schema, obj api.Object) string {
	t, err := s.PDP.ResourceTenant(ctx, obj.Type, obj.ID)
	if err != nil {
		return ""
	}
	return t
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
func (s *API) handleAuthorizedUsers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.PDP.Budget(r.Context())
	defer cancel()
	body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	var req authorizedUsersRequest
	if err := wire.DecodeJSON(body, &req, false, ""); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	q := checkapi.PermitQuery{User: json.RawMessage(`"-"`), Action: req.Action, Resource: req.Resource}
	c, err := q.Check()
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	sc, err := s.Store.Schema(ctx)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	if !s.PDP.KnownType(c.Resource.Type) {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrUnknownType, "resource.type %q is not a type of the schema", c.Resource.Type))
		return
	}
	obj := api.Object{Type: c.Resource.Type, ID: c.Resource.ID}
	if c.Resource.Tenant == "" && obj.ID != "" {
		c.Resource.Tenant = s.resourceTenant(ctx, sc, obj)
	}
	candidates := map[string][]assignment{}
	if c.Resource.Tenant != "" {
		ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: sc.TenantType(), ObjectID: c.Resource.Tenant, SubjectType: "user"})
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		for _, t := range ts {
			if sc.Grants([]string{t.Relation}, obj.Type, c.Action) {
				candidates[t.Subject.ID] = append(candidates[t.Subject.ID], assignment{User: t.Subject.ID, Tenant: c.Resource.Tenant, Resource: "__tenant:" + c.Resource.Tenant, Role: t.Relation})
			}
		}
	}
	if obj.ID != "" && slices.Contains(sc.Permissions(obj.Type), c.Action) {
		ids, err := s.Store.LookupSubjects(ctx, obj, c.Action, "user")
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		for _, id := range ids {
			candidates[id] = append(candidates[id], assignment{User: id, Tenant: c.Resource.Tenant, Resource: obj.String(), Role: c.Action})
		}
	}
	if len(candidates) > s.MaxBatch {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "%d candidate users, at most %d in one request", len(candidates), s.MaxBatch))
		return
	}
	users := map[string][]assignment{}
	for id, as := range candidates {
		uc := c
		uc.Subject = checkapi.Subject{Type: "user", ID: id}
		uc.Context = req.Context
		d, err := s.PDP.Check(ctx, pdp.IfacePermit, &uc)
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		if d.Allowed {
			users[id] = as
		}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{
		"resource": strings.TrimSuffix(obj.String(), ":"),
		"tenant":   c.Resource.Tenant,
		"users":    users,
	})
}

// objectOf is the resource of c as a store object.
func objectOf(c *checkapi.Check) api.Object {
	return api.Object{Type: c.Resource.Type, ID: c.Resource.ID}
}

// concreteGrants turns role grants into the concrete "type:action"
// permissions they give, as Permit lists them: "file:*" is every action
// on files (the type's permissions and the actions roles grant on it),
// "*:read" is read on every type that has it, "*:*" everything.
func concreteGrants(sc *schema.Schema, grants []string) []string {
	var out []string
	for _, g := range grants {
		typ, act, _ := strings.Cut(g, ":")
		types := []string{typ}
		if typ == "*" {
			types = sc.Types()
		}
		for _, t := range types {
			names := actionNames(sc, t)
			switch {
			case act == "*":
				for _, a := range names {
					out = append(out, t+":"+a)
				}
			case typ != "*" || slices.Contains(names, act):
				out = append(out, t+":"+act)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
