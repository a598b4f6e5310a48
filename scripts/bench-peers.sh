#!/usr/bin/env bash
# Installs the peers `nexus-bench peers` compares nexus with, when they
# are missing: OPA and OpenFGA, built from source with the Go toolchain
# into $(go env GOPATH)/bin. The versions are pinned here.
set -euo pipefail

OPA_VERSION=v1.22.3
OPENFGA_VERSION=v1.22.1

bin="$(go env GOPATH)/bin"
# have NAME MODULE VERSION: the program in $bin was built from MODULE at VERSION.
have() { [ -x "$bin/$1" ] && go version -m "$bin/$1" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)"; }

if have opa github.com/open-policy-agent/opa "$OPA_VERSION"; then
	echo "bench-peers: opa $OPA_VERSION is installed"
else
	echo "bench-peers: installing opa $OPA_VERSION into $bin"
	go install "github.com/open-policy-agent/opa@$OPA_VERSION"
fi
if have openfga github.com/openfga/openfga "$OPENFGA_VERSION"; then
	echo "bench-peers: openfga $OPENFGA_VERSION is installed"
else
	echo "bench-peers: installing openfga $OPENFGA_VERSION into $bin (several minutes)"
	go install "github.com/openfga/openfga/cmd/openfga@$OPENFGA_VERSION"
fi
