# Mesh identity: the caller is the SPIFFE ID of the mTLS peer
# (source_principal, which the plugin lifts from the source peer); a
# service may call the methods and path prefixes data grants its
# namespace and service account.
package envoy.authz

import input.attributes.request.http

default allow := false

caller := {"ns": ns, "sa": sa} if {
	["spiffe:", "", "cluster.local", "ns", ns, "sa", sa] = split(input.source_principal, "/")
}

allow if {
	some rule in data.mesh[caller.ns]
	rule.sa in {"*", caller.sa}
	http.method in rule.methods
	startswith(http.path, rule.prefix)
}
