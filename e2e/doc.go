// Package e2e holds nexus' end-to-end and deployment tests. It is a Go
// module of its own (github.com/nexuspdp/nexus/e2e) so that the heavy
// dependencies these tests need (go-control-plane's full set of Envoy
// extensions, istio.io/api, Kubernetes' apiextensions validation) stay out
// of the main module.
//
// Run it from the repository root with `make test`, or alone:
//
//	cd e2e && go test -count=1 ./...
//
// The deployment tests validate every file under envoy/ offline: Envoy
// bootstrap files, Istio resources and mesh config, Kubernetes manifests and
// the docker-compose file; each is then misspelt key by key, and every
// misspelling must be rejected. Rules then check what the files mean (who
// the user is, who reaches the admin API, where the store lives), each also
// on a copy with its defect put back. internal/confcheck holds the validators,
// internal/proxy starts nginx, Caddy and HAProxy from Debian in front of
// nexus' forward-auth listener.
//
// The fault tests (package fault, `go test -run Fault ./...`) run three
// NATS nodes and three nexus replicas under a nemesis that kills, stalls
// and restarts them while clients write and check; internal/faultcheck
// then verifies what the clients were told against what every replica
// holds. NEXUS_FAULT_SEED and NEXUS_FAULT_DURATION replay or lengthen a
// run.
//
// # Caveats
//
// The first build compiles several hundred generated protobuf packages and
// takes minutes on a small machine; later runs use the build cache. The
// docker-compose test needs a Docker engine and skips without one, writing
// its reason to $NEXUS_TEST_NOTES (make test prints it).
package e2e
