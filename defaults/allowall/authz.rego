# An allow-only policy for application checks (AuthZEN, /allowed): the
# baseline of nexus-bench.
package nexus.authz

import rego.v1

decision := {"allow": true, "reason": "allow"}
