package appapi

import (
	"net/http"

	"github.com/nexuspdp/nexus/extauthz/internal/checkapi"
	"github.com/nexuspdp/nexus/extauthz/internal/wire"
	"github.com/nexuspdp/nexus/pdp"
)

// urlResponse is Permit's answer to /allowed_url and /nginx_allowed: the
// decision and the check it was made on.
type urlResponse struct {
	checkapi.PermitResponse
	Query map[string]any `json:"query,omitempty"`
}

func queryOf(c *checkapi.Check) map[string]any {
	res := map[string]any{"type": c.Resource.Type}
	if c.Resource.ID != "" {
		res["key"] = c.Resource.ID
	}
	if c.Resource.Tenant != "" {
		res["tenant"] = c.Resource.Tenant
	}
	return map[string]any{"user": map[string]any{"key": c.Subject.ID}, "action": c.Action, "resource": res}
}

// handleAllowedURL answers Permit's /allowed_url: may the user send this
// HTTP request? The loaded policy's route rules (the same that map
// proxied requests) name the action and the resource, "{id}" and
// "{tenant}" segments its id and tenant (else the request's tenant);
// then it is an /allowed check. No matching rule is a deny, with the
// reason.
func (s *API) handleAllowedURL(w http.ResponseWriter, r *http.Request) {
	q, ok := decodeBody(s, w, r, pdp.IfacePermit, checkapi.ReadPermitURL)
	if !ok {
		return
	}
	route, ok := s.PDP.MatchRoute(q.Method, q.Segments)
	if !ok {
		wire.WriteJSON(w, http.StatusOK, urlResponse{
			PermitResponse: checkapi.PermitResponse{Debug: map[string]any{"reason": "no_route", "error": "no route rule matches " + q.Method + " " + q.RawURL}},
		})
		return
	}
	tenant := route.Tenant
	if tenant == "" {
		tenant = q.Tenant
	}
	c := checkapi.Check{Subject: q.User, Action: route.Action, Resource: checkapi.Resource{Type: route.Type, ID: route.ID, Tenant: tenant}, Context: q.Context}
	if err := c.Validate(); err != nil {
		s.PDP.CountError(pdp.IfacePermit, err)
		wire.WriteError(s.Log, w, err)
		return
	}
	d, err := s.PDP.Check(r.Context(), pdp.IfacePermit, &c)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, urlResponse{PermitResponse: permitResponse(d), Query: queryOf(&c)})
}

// handleNginxAllowed answers Permit's /nginx_allowed, for nginx's
// auth_request: the check comes from the headers permit-user-key,
// permit-action, permit-resource-type and permit-tenant-id. Unlike
// Permit's PDP, which answers 200 either way, a deny is 403 (with the
// same body): auth_request lets a request through on any 2xx.
func (s *API) handleNginxAllowed(w http.ResponseWriter, r *http.Request) {
	c := checkapi.Check{
		Subject:  checkapi.Subject{Type: "user", ID: r.Header.Get("Permit-User-Key")},
		Action:   r.Header.Get("Permit-Action"),
		Resource: checkapi.Resource{Type: r.Header.Get("Permit-Resource-Type"), Tenant: r.Header.Get("Permit-Tenant-Id")},
	}
	for _, h := range [][2]string{{"Permit-User-Key", c.Subject.ID}, {"Permit-Action", c.Action}, {"Permit-Resource-Type", c.Resource.Type}} {
		if h[1] == "" {
			err := pdp.Errorf(pdp.ErrBadRequest, "the %s header is required", h[0])
			s.PDP.CountError(pdp.IfacePermit, err)
			wire.WriteError(s.Log, w, err)
			return
		}
	}
	if err := c.Validate(); err != nil {
		s.PDP.CountError(pdp.IfacePermit, err)
		wire.WriteError(s.Log, w, err)
		return
	}
	d, err := s.PDP.Check(r.Context(), pdp.IfacePermit, &c)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	status := http.StatusOK
	if !d.Allowed {
		status = http.StatusForbidden
	}
	wire.WriteJSON(w, status, urlResponse{PermitResponse: permitResponse(d), Query: queryOf(&c)})
}

// handleKong answers Kong's OPA plugin as Permit's /kong does:
// {"result": bool}. The consumer Kong authenticated is the user; the
// loaded policy's route rules map the method and path to the action and
// the resource. No consumer, or no matching rule, is false. Kong's OPA
// plugin cannot send an API key, so /kong needs none, like forward auth:
// it trusts the consumer Kong names.
func (s *API) handleKong(w http.ResponseWriter, r *http.Request) {
	k, ok := decodeBody(s, w, r, pdp.IfacePermit, checkapi.ReadKong)
	if !ok {
		return
	}
	segs, err := checkapi.PathSegments(k.Path)
	if err != nil {
		s.PDP.CountError(pdp.IfacePermit, err)
		wire.WriteError(s.Log, w, err)
		return
	}
	if k.Consumer == "" {
		wire.WriteJSON(w, http.StatusOK, map[string]bool{"result": false})
		return
	}
	route, ok := s.PDP.MatchRoute(k.Method, segs)
	if !ok {
		wire.WriteJSON(w, http.StatusOK, map[string]bool{"result": false})
		return
	}
	c := checkapi.Check{Subject: checkapi.Subject{Type: "user", ID: k.Consumer}, Action: route.Action, Resource: checkapi.Resource{Type: route.Type, ID: route.ID, Tenant: route.Tenant}}
	if err := c.Validate(); err != nil {
		s.PDP.CountError(pdp.IfacePermit, err)
		wire.WriteError(s.Log, w, err)
		return
	}
	d, err := s.PDP.Check(r.Context(), pdp.IfacePermit, &c)
	if err != nil {
		wire.WriteError(s.Log, w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, map[string]bool{"result": d.Allowed})
}
