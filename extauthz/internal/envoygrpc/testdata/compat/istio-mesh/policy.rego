# Mesh identity from Istio (an AuthorizationPolicy with action CUSTOM):
# with mTLS the sidecar sends each peer's principal, a SPIFFE ID. Only the
# shop's frontend service account may call the ratings service, and only
# to read. source_principal is the plugin's copy of
# attributes.source.principal.
package envoy.authz

import rego.v1

default allow := false

spiffe(id) := {"trust_domain": parts[2], "namespace": parts[4], "service_account": parts[6]} if {
	parts := split(id, "/")
	count(parts) == 7
	parts[0] == "spiffe:"
	parts[3] == "ns"
	parts[5] == "sa"
}

source := spiffe(input.source_principal)

destination := spiffe(input.attributes.destination.principal)

allow if {
	source == {"trust_domain": "cluster.local", "namespace": "shop", "service_account": "frontend"}
	destination.service_account == "ratings"
	input.attributes.request.http.method == "GET"
}
