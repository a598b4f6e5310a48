# The floor: a decision that reads nothing.
package envoy.authz

allow := true
