#!/usr/bin/env bash
# Installs the third-party programs that the end-to-end tests drive, when
# they are missing. Needs root (apt-get); without root it only reports.
set -euo pipefail

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
