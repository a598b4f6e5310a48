package builtins

import "context"

// View answers the questions nexus.resource_tenant, nexus.grant and
// nexus.envoy_decide answer, from one view of the store, for a policy's
// Go decider (decider.Decider) that decides as the Wasm calling them
// would.
type View struct{ r reader }

// Read calls fn with a View of s: one datastore.View when s is a
// *datastore.BoltStore.
func Read(ctx context.Context, s Store, fn func(View) error) error {
	return withView(ctx, s, func(l storeView) error { return fn(View{reader{l}}) })
}

// ResourceTenant is nexus.resource_tenant for the resource typ:id that
// subType:subID asks about, the request claiming the tenant claimed (""
// for none): the resource's tenant, or the denial ("tenant_mismatch",
// "no_tenant") the default policy gives.
func (v View) ResourceTenant(subType, subID, typ, id, claimed string) (tenant, denial string, err error) {
	vd, tenant, err := v.r.resourceTenant(subType, subID, typ, id, claimed)
	switch {
	case err != nil:
		return "", "", err
	case vd == verdictMismatch:
		return "", "tenant_mismatch", nil
	case vd == verdictNone:
		return "", "no_tenant", nil
	}
	return tenant, "", nil
}

// Grant is nexus.grant for subType:subID: "rbac", "rebac" or "" for no
// grant.
func (v View) Grant(subType, subID, action, typ, id, tenant string) (string, error) {
	return v.r.grant(subType, subID, action, typ, id, tenant)
}

// EnvoyRequest is a proxied request as nexus.envoy_decide reads it:
// method, tenant header and the subject it names.
type EnvoyRequest struct{ r envoyRequest }

// NewEnvoyRequest is a request of method whose tenant header is tenant
// ("" when absent), naming no subject yet.
func NewEnvoyRequest(method, tenant string) EnvoyRequest {
	return EnvoyRequest{envoyRequest{method: method, tenant: tenant}}
}

// Identify sets the subject the request names from the JSON texts of
// the JWT payloads ("null" for none) and of the subject header ("null"
// when absent), as nexus.envoy_decide reads them: a verified JWT
// decides, the header counts only without one.
func (e *EnvoyRequest) Identify(jwt, header string) error { return e.r.identify(jwt, header) }

// Claim makes the request name subject, as a subject header of that
// value does without a JWT.
func (e *EnvoyRequest) Claim(subject string) {
	e.r.claimed, e.r.subject, e.r.subjectOK = true, subject, true
}

// EnvoyDecide is nexus.envoy_decide's answer to req on path, with the
// route table t.
func (v View) EnvoyDecide(t *Table, req *EnvoyRequest, path []string) (Answer, error) {
	return envoyAnswer(v.r, t, &req.r, path)
}

// ParseTable reads a route table as AppendTable writes it
// (data.nexus.route_table).
func ParseTable(text string) (*Table, error) { return parseTable(text) }
