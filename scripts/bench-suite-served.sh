#!/usr/bin/env bash
# The policy suite served: for each policy of bench/suite/policies, nexus
# serve (ext_authz gRPC, decision cache off) and opa run --server (its
# REST data API, with the input opa-envoy-plugin would build from the same
# CheckRequest) are loaded with the policy and driven one after the other
# (nexus' default policy, whose builtins OPA does not have, by nexus alone,
# on its demo data, trusting the x-user header as its cases do)
# by bench/cmd/suite-served (C clients, a WINDOW each, ROUNDS rounds),
# each server warmed up for a second first; the table gives the medians of
# the rounds' median latency and of the server's CPU per check. In every
# round each policy's nexus is paired with a nexus serving `allow := true`
# (started once, driven just before it with the same request): the "above
# allow-true" column is the median of the rounds' differences, so the
# machine's drift during the run cancels. OPA is installed as
# scripts/bench-peers.sh installs it (pinned version) when it is missing.
#
#   scripts/bench-suite-served.sh            # writes bench-out/suite/served.md
#   ROUNDS=3 WINDOW=5s C=4 BENCH_SUITE_RUN='jwt' scripts/bench-suite-served.sh
#   PIN=1 scripts/bench-suite-served.sh      # servers on the last CPU, the driver on the others
set -euo pipefail

cd "$(dirname "$0")/.."
out="${BENCH_SUITE_OUT:-bench-out/suite}"
rounds="${ROUNDS:-3}"
window="${WINDOW:-3s}"
conns="${C:-4}"
run="${BENCH_SUITE_RUN:-.}"
# PIN=1: every server on the last CPU with GOMAXPROCS=1, the driver on
# the others, so that a server's CPU per check is not shared with the
# load it is measured under.
server=()
client=()
if [ "${PIN:-0}" = 1 ]; then
	last=$(($(nproc) - 1))
	if [ "$last" -lt 1 ]; then
		echo "bench-suite-served: PIN=1 needs two CPUs or more" >&2
		exit 2
	fi
	server=(taskset -c "$last" env GOMAXPROCS=1)
	client=(taskset -c "0-$((last - 1))")
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
pids=()
bpid=""
cleanup() {
	for p in "${pids[@]}" $bpid; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

OPA_VERSION=v1.22.3
opa="$(go env GOPATH)/bin/opa"
if ! go version -m "$opa" 2>/dev/null | grep -qE "mod[[:space:]]+github.com/open-policy-agent/opa[[:space:]]+$OPA_VERSION"; then
	echo "bench-suite-served: installing opa $OPA_VERSION" >&2
	go install "github.com/open-policy-agent/opa@$OPA_VERSION"
fi
go build -tags vtprotobuf -o "$work/nexus" ./cmd/nexus
(cd bench && go build -o "$work/driver" ./cmd/suite-served)
mkdir -p "$work/inputs"
NEXUS_SUITE_DUMP="$work/inputs" go test -count=1 -run '^TestSuiteDump$' ./extauthz >/dev/null

# wait_for URL: until it answers (a server's health endpoint).
wait_for() {
	for _ in $(seq 1 100); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-suite-served: $1 did not come up" >&2
	return 1
}

# The baseline: allow := true, served the whole run on its own ports.
mkdir -p "$work/policy-baseline"
cp bench/suite/policies/allow-true/*.rego "$work/policy-baseline/"
"${server[@]}" "$work/nexus" serve --policy "$work/policy-baseline" -e envoy/authz/allow --envoy-entrypoint envoy/authz/allow \
	--authz-entrypoint - --no-cache --data-dir "$work/data-baseline" --grpc-addr 127.0.0.1:19192 \
	--http-addr 127.0.0.1:19182 --admin-addr - --log-level error >"$work/nexus-baseline.log" 2>&1 &
bpid=$!
wait_for http://127.0.0.1:19182/healthz
"${client[@]}" "$work/driver" -name "warm-up" -grpc 127.0.0.1:19192 -body "$work/inputs/allow-true.request.json" \
	-pid "$bpid" -c "$conns" -d 1s >/dev/null

# warm_up PID ARGS...: one second of load, not recorded, on a server just
# started (its instances made, its caches filled).
warm_up() {
	local pid=$1
	shift
	"${client[@]}" "$work/driver" -name "warm-up" -pid "$pid" -c "$conns" -d 1s "$@" >/dev/null
}

# baseline NAME: drives the allow := true nexus with NAME's request.
baseline() {
	[ "$1" = allow-true ] && return 0
	"${client[@]}" "$work/driver" -name "$1 allow" -grpc 127.0.0.1:19192 -body "$work/inputs/$1.request.json" \
		-pid "$bpid" -c "$conns" -d "$window" | tee -a "$out/served.txt"
}

: > "$out/served.txt"
for m in bench/suite/policies/*/suite.json; do
	dir="$(dirname "$m")"
	name="$(basename "$dir")"
	[[ "$name" =~ $run ]] || continue
	if grep -q '"default": true' "$m"; then
		"${server[@]}" "$work/nexus" serve --trusted-subject-header x-user --no-cache --data-dir "$work/data-$name" \
			--grpc-addr 127.0.0.1:19191 --http-addr 127.0.0.1:19181 --admin-addr - --log-level error >"$work/nexus-$name.log" 2>&1 &
		npid=$!; pids+=("$npid")
		wait_for http://127.0.0.1:19181/healthz
		warm_up "$npid" -grpc 127.0.0.1:19191 -body "$work/inputs/$name.request.json"
		for i in $(seq 1 "$rounds"); do
			baseline "$name"
			"${client[@]}" "$work/driver" -name "$name nexus" -grpc 127.0.0.1:19191 -body "$work/inputs/$name.request.json" \
				-pid "$npid" -c "$conns" -d "$window" | tee -a "$out/served.txt"
		done
		kill "$npid"; wait "$npid" 2>/dev/null || true
		pids=()
		continue
	fi
	from="$(sed -n 's/.*"from": *"\([^"]*\)".*/\1/p' "$m")"
	src="${from:-$dir}"
	pol="$work/policy-$name"
	mkdir -p "$pol"
	cp "$src"/*.rego "$pol/"
	[ -f "$src/data.json" ] && cp "$src/data.json" "$pol/"

	"${server[@]}" "$work/nexus" serve --policy "$pol" -e envoy/authz/allow --envoy-entrypoint envoy/authz/allow \
		--authz-entrypoint - --no-cache --data-dir "$work/data-$name" --grpc-addr 127.0.0.1:19191 \
		--http-addr 127.0.0.1:19181 --admin-addr - --log-level error >"$work/nexus-$name.log" 2>&1 &
	npid=$!; pids+=("$npid")
	args=(run --server --addr 127.0.0.1:18181 --log-level error "$pol"/*.rego)
	[ -f "$pol/data.json" ] && args+=("$pol/data.json")
	"${server[@]}" "$opa" "${args[@]}" >"$work/opa-$name.log" 2>&1 &
	opid=$!; pids+=("$opid")
	wait_for http://127.0.0.1:19181/healthz
	wait_for http://127.0.0.1:18181/health
	warm_up "$npid" -grpc 127.0.0.1:19191 -body "$work/inputs/$name.request.json"
	warm_up "$opid" -rest http://127.0.0.1:18181/v1/data/envoy/authz/allow -body "$work/inputs/$name.input.json"

	for i in $(seq 1 "$rounds"); do
		baseline "$name"
		"${client[@]}" "$work/driver" -name "$name nexus" -grpc 127.0.0.1:19191 -body "$work/inputs/$name.request.json" \
			-pid "$npid" -c "$conns" -d "$window" | tee -a "$out/served.txt"
		"${client[@]}" "$work/driver" -name "$name opa" -rest http://127.0.0.1:18181/v1/data/envoy/authz/allow \
			-body "$work/inputs/$name.input.json" -pid "$opid" -c "$conns" -d "$window" | tee -a "$out/served.txt"
	done
	kill "$npid" "$opid"; wait "$npid" "$opid" 2>/dev/null || true
	pids=()
done

{
	echo "| policy | nexus p50 µs | OPA p50 µs | nexus CPU µs/check | nexus CPU above allow-true µs | OPA CPU µs/check | nexus checks/s | OPA checks/s |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	awk '
	function median(key,   n, i, j, t, v) {
		n = cnt[key]
		if (n == 0) return "-"
		for (i = 1; i <= n; i++) v[i] = vals[key, i]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
		if (n % 2) return sprintf("%.0f", v[(n + 1) / 2])
		return sprintf("%.0f", (v[n / 2] + v[n / 2 + 1]) / 2)
	}
	{
		if (!($1 in seen)) { seen[$1] = 1; order[++np] = $1 }
		for (f = 3; f <= NF; f++) {
			split($f, kv, "=")
			key = $1 SUBSEP $2 SUBSEP kv[1]
			vals[key, ++cnt[key]] = kv[2]
		}
	}
	END {
		for (i = 1; i <= np; i++) {
			p = order[i]
			# the rounds differences, the policy against its paired baseline
			n = cnt[p SUBSEP "allow" SUBSEP "cpu"]
			for (r = 1; r <= n && r <= cnt[p SUBSEP "nexus" SUBSEP "cpu"]; r++) {
				k = p SUBSEP "above" SUBSEP "cpu"
				vals[k, ++cnt[k]] = vals[p SUBSEP "nexus" SUBSEP "cpu", r] - vals[p SUBSEP "allow" SUBSEP "cpu", r]
			}
			above = median(p SUBSEP "above" SUBSEP "cpu")
			if (p == "allow-true") above = 0
			printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p,
				median(p SUBSEP "nexus" SUBSEP "p50"), median(p SUBSEP "opa" SUBSEP "p50"),
				median(p SUBSEP "nexus" SUBSEP "cpu"), above, median(p SUBSEP "opa" SUBSEP "cpu"),
				median(p SUBSEP "nexus" SUBSEP "rps"), median(p SUBSEP "opa" SUBSEP "rps")
		}
	}' "$out/served.txt"
	echo
	echo "Medians of $rounds rounds of $window with $conns clients at once on loopback, the client on the same machine ($(nproc) CPUs, $(git rev-parse --short HEAD)); CPU per check from /proc (10 ms ticks); above allow-true: the median of each round's difference with the allow := true nexus driven just before, with the same request."
} > "$out/served.md"
cat "$out/served.md"
