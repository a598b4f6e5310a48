# The request's attributes as the plugin maps them (its conversion by
# reflection, with the fields' JSON names): a Timestamp as seconds and
# nanos, an int64 and an enum as numbers, an Any as its type URL and its
# bytes (base64 once the input is JSON). The policy hands them back in
# dynamic_metadata, so the whole response shows the mapping.
package envoy.authz

import rego.v1

default allow := false

allow := {"allowed": true, "dynamic_metadata": {
	"time": input.attributes.request.time,
	"size": input.attributes.request.http.size,
	"protocol": input.attributes.request.http.protocol,
	"source": input.attributes.source.address,
	"typed": input.attributes.metadataContext.typedFilterMetadata,
	"context": input.attributes.contextExtensions,
}}
