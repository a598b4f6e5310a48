# Path and query rules on parsed_path and parsed_query, which the plugin
# computes from the request's :path: the path part percent-decoded, then
# split at "/" once its leading slashes are trimmed (a leading "//" is a
# path, never an authority); the query parsed into lists of values; a
# query that does not parse refuses the request.
package envoy.authz

import rego.v1

default allow := false

# GET /api/v1/items/<id>?version=2, version 2 alone, without debug
allow if {
	input.attributes.request.http.method == "GET"
	count(input.parsed_path) == 4
	input.parsed_path[0] == "api"
	input.parsed_path[1] == "v1"
	input.parsed_path[2] == "items"
	input.parsed_query.version == ["2"]
	not input.parsed_query.debug
}

# GET /api/v1/public, whatever the query
allow if {
	input.attributes.request.http.method == "GET"
	input.parsed_path == ["api", "v1", "public"]
}
