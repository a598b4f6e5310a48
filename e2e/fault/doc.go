// Package fault holds nexus' fault tests: a 3-node NATS JetStream cluster
// and three nexus replicas, every process a real binary, under a nemesis
// that kills, stalls and restarts them while clients write and check.
// Select them with `go test -run Fault ./...` from e2e/.
//
// # Caveats
//
// They need nats-server (make deps installs it) and skip without it
// unless NEXUS_REQUIRE_TOOLS=1. TestFaultNemesis takes about a minute;
// NEXUS_FAULT_DURATION makes its faults last longer and NEXUS_FAULT_SEED
// replays a run's choice of faults (their timing still varies).
package fault
