# The default nexus policy for proxied HTTP requests (Envoy ext_authz gRPC
# and HTTP, nginx auth_request, Caddy forward_auth, Traefik ForwardAuth).
#
# input: the opa-envoy-plugin input document.
#
# Route rules (data.nexus.routes, in order, first match wins) map the
# method and path to an action and a resource: a path segment "{id}" names
# the resource, "{tenant}" its tenant, "*" matches any one segment. The
# subject is the "sub" of a JWT verified by Envoy's jwt_authn filter (its
# payload in the request's metadata) or, only without a JWT, the header
# data.nexus.subject_header, which the server sets only when told that a
# trusted hop sets it (nexus serve --trusted-subject-header); the tenant
# comes from a path segment or the header data.nexus.tenant_header.
#
# The host builtin nexus.envoy_decide answers the rest, in one call:
#   - no route rule matches: 403, reason "no_route";
#   - no subject: 401, reason "no_subject";
#   - the subject, the tenant or the resource ID is not an ID the store can
#     hold (letters, digits and _-.=+/|~, at most 256 bytes; not "." or
#     ".."): anything else, a header sent twice (joined with ","), a space,
#     an empty value, is the client's error, 400 "invalid_request",
#     answered before the store is asked;
#   - otherwise the check is decided as data.nexus.authz.decide decides an
#     application check (the resource's tenant, the ABAC conditions, RBAC,
#     ReBAC): an allow names the subject and the reason in the headers
#     x-nexus-subject and x-nexus-decision, a deny is 403 with the reason.
# A result names the subject it decided for ("subject"): nexus' decision
# log records it. Envoy ignores the field.
package nexus.envoy

import rego.v1

# Only the fields the policy names are read: nexus passes a policy just the
# parts of the input document it refers to.
default method := ""

method := input.attributes.request.http.method

# The subject and tenant headers, named in data.
default subject_header := null

subject_header := input.attributes.request.http.headers[data.nexus.subject_header]

default tenant_header := ""

tenant_header := input.attributes.request.http.headers[data.nexus.tenant_header]

# The payloads of the JWTs Envoy's jwt_authn filter verified. A verified
# JWT decides the subject (its "sub", when the payloads have exactly one);
# the subject header counts only when no JWT came with the request.
default jwt_payloads := null

jwt_payloads := input.attributes.metadataContext.filterMetadata["envoy.filters.http.jwt_authn"]

# The route rules and conditions as nexus.envoy_decide reads them: the
# server writes them into data.nexus.route_table when it loads the policy;
# without it (OPA, nexus test) the policy writes them itself.
segments(r) := r.segments

segments(r) := split(trim_prefix(r.path, "/"), "/") if not r.segments

route_table := data.nexus.route_table

default conditions := []

conditions := data.nexus.conditions

route_table := json.marshal({
	"routes": [[r.method, r.action, r.type, segments(r)] | some r in data.nexus.routes],
	"conditions": conditions,
}) if not data.nexus.route_table

# The request goes to the builtin as the array itself, which it reads in
# place (its JSON text, json.marshal'd, is read the same).
result := nexus.envoy_decide(route_table, [method, input.parsed_path, jwt_payloads, subject_header, tenant_header])
