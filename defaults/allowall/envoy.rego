# An allow-only policy: the baseline of nexus-bench. Every proxied
# request is allowed, so what a benchmark measures against it is the cost
# of the transport and of nexus' request handling, not of a policy.
package nexus.envoy

import rego.v1

result := true
