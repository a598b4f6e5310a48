package appapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/datastore/schema"
	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// userTenants are the tenants where the store gives user a role (any
// relation on a tenant object), sorted.
func (s *API) userTenants(ctx context.Context, sc *schema.Schema, user checkapi.Subject) ([]string, error) {
	tt := sc.TenantType()
	if tt == "" {
		return nil, nil
	}
	ts, err := s.Store.Read(ctx, datastore.Filter{ObjectType: tt, SubjectType: user.Type, SubjectID: user.ID})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range ts {
		if t.Subject.Relation == "" {
			out = append(out, t.Object.ID)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

type tenantDetails struct {
	Key        string         `json:"key"`
	Attributes map[string]any `json:"attributes"`
}

// handleUserTenants answers Permit's /user-tenants: the tenants where the
// user holds a role, as [{"key", "attributes"}].
func (s *API) handleUserTenants(w http.ResponseWriter, r *http.Request) {
	body, err := wire.ReadJSON(w, r, s.MaxBodyBytes)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	var req struct {
		User json.RawMessage `json:"user"`
	}
	if err := wire.DecodeJSON(body, &req, false, ""); err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	user, err := checkapi.PermitUser(req.User)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	sc, err := s.Store.Schema(r.Context())
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	tenants, err := s.userTenants(r.Context(), sc, user)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	out := make([]tenantDetails, len(tenants))
	for i, t := range tenants {
		out[i] = tenantDetails{Key: t, Attributes: map[string]any{}}
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

type allowedTenant struct {
	checkapi.PermitResponse
	Tenant tenantDetails `json:"tenant"`
}

// handleAllowedAllTenants answers Permit's /allowed/all-tenants: the
// /allowed query decided in each tenant where the user holds a role and
// in the resource's own tenant; the answer lists the tenants where it is
// allowed, in order.
func (s *API) handleAllowedAllTenants(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.PDP.Budget(r.Context())
	defer cancel()
	c, ok := decodeBody(s, w, r, pdp.IfacePermit, checkapi.ReadPermit)
	if !ok {
		return
	}
	sc, err := s.Store.Schema(ctx)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	tenants, err := s.userTenants(ctx, sc, c.Subject)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	if own := s.resourceTenant(ctx, sc, objectOf(&c)); own != "" && !slices.Contains(tenants, own) {
		tenants = append(tenants, own)
		slices.Sort(tenants)
	}
	if len(tenants) > s.MaxBatch {
		wire.WriteError(s.Log, w, pdp.Errorf(pdp.ErrBadRequest, "the user is in %d tenants, at most %d in one request", len(tenants), s.MaxBatch))
		return
	}
	out := []allowedTenant{}
	for _, t := range tenants {
		tc := c
		tc.Resource.Tenant = t
		d, err := s.PDP.Check(ctx, pdp.IfacePermit, &tc)
		if err != nil {
			wire.WriteError(s.Log, w, err)
			return
		}
		if d.Allowed {
			out = append(out, allowedTenant{PermitResponse: permitResponse(d), Tenant: tenantDetails{Key: t, Attributes: map[string]any{}}})
		}
	}
	wire.WriteJSON(w, http.StatusOK, map[string]any{"allowed_tenants": out})
}
