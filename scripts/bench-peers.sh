#!/usr/bin/env bash
# Installs the peers `nexus bench peers` compares nexus with, when they
# are missing: OPA and OpenFGA, built from source with the Go toolchain
# into $(go env GOPATH)/bin. The versions are pinned here.
set -euo pipefail

OPA_VERSION=v1.22.3
OPENFGA_VERSION=v1.22.1

bin="$(go env GOPATH)/bin"
have() { [ -x "$bin/$1" ] && "$bin/$1" version 2>&1 | grep -q "${2#v}"; }

if have opa "$OPA_VERSION"; then
	echo "bench-peers: opa $OPA_VERSION is installed"
else
	echo "bench-peers: installing opa $OPA_VERSION into $bin"
	go install "github.com/open-policy-agent/opa@$OPA_VERSION"
fi
if have openfga "$OPENFGA_VERSION"; then
	echo "bench-peers: openfga $OPENFGA_VERSION is installed"
else
	echo "bench-peers: installing openfga $OPENFGA_VERSION into $bin"
	go install "github.com/openfga/openfga/cmd/openfga@$OPENFGA_VERSION"
fi
