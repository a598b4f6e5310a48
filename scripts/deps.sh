#!/usr/bin/env bash
# Installs the third-party programs that the end-to-end tests drive, when
# they are missing. Needs root (apt-get); without root it only reports.
set -euo pipefail

# nats-server (the cluster tests' NATS), pinned, built with the Go
# toolchain into $(go env GOPATH)/bin where the tests look for it.
NATS_SERVER_VERSION=v2.15.2
gobin="$(go env GOPATH)/bin"
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x "$gobin/nats-server" ]; then
	echo "deps: installing nats-server $NATS_SERVER_VERSION into $gobin"
	go install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION"
fi

need=()
for prog in nginx caddy haproxy curl; do
	command -v "$prog" >/dev/null 2>&1 || [ -x "/usr/sbin/$prog" ] || need+=("$prog")
done
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${need[*]}; run 'make deps' as root to install them" >&2
	exit 1
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
