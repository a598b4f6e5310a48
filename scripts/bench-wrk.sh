#!/usr/bin/env bash
# bench-wrk.sh: server CPU per HTTP check at saturation, measured with wrk.
#
# Each server runs alone on CPU 0 (taskset); wrk runs on CPU 1 with 16
# keep-alive connections for DURATION seconds, cycling through the first
# N checks of the Zipf workload (or one check, for a cache hit on every
# request). The server's CPU time comes from /proc/PID/stat; CPU per
# check is that time over the requests wrk completed. Servers, in order:
#   nexus            POST /allowed, decision cache on
#   nexus --no-cache POST /allowed and AuthZEN's evaluation, every
#                    check runs the policy
#   nexus allow-only POST /allowed and AuthZEN's evaluation, a policy
#                    that allows everything
#   opa              POST /v1/data/nexusbench/allow (same data, the
#                    equivalent Rego policy `nexus-bench peers` uses)
#   ...-rbac, ...-rebac3
#                    nexus --no-cache and OPA on the rbac and rebac3 gate
#                    files (1,000 checks each), when the data set has them
# each for ROUNDS interleaved rounds; it prints one line per run and the
# medians. Before each run, the first 500 checks must get the data set's
# answers (all allowed, for the allow-only policy).
#
# Needs: bin/nexus (make build), the data set and the peers' files of
# `make bench-peers` in bench-out/ (data/, peers/opa, peers/nexus-data,
# peers/allowall), opa on PATH or in $(go env GOPATH)/bin, wrk and taskset.
# BENCH_DATA and BENCH_NEXUS_DATA point at another data set (its
# directory from `nexus-bench gen`, with a Zipf workload, and a nexus
# data directory holding its tuples); BENCH_PEERS= leaves OPA out.
#
#   scripts/bench-wrk.sh [N] [DURATION] [ROUNDS]
set -euo pipefail

N=${1:-100000}
DURATION=${2:-10}
ROUNDS=${3:-3}
OUT=${BENCH_OUT:-bench-out}
DATA=${BENCH_DATA:-$OUT/data}                          # schema and Zipf workload
NEXUS_DATA=${BENCH_NEXUS_DATA:-$OUT/peers/nexus-data}  # a nexus data directory holding DATA's tuples
PEERS=${BENCH_PEERS-opa}                               # empty: nexus only
BIN=${NEXUS_BIN:-bin/nexus}
OPA=$(command -v opa || echo "$(go env GOPATH)/bin/opa")
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

need=("$BIN" "$DATA/zipf-s1.1.ndjson" "$DATA/schema.yaml" "$NEXUS_DATA/relations.db" "$OUT/peers/allowall/authz.rego")
if [ -n "$PEERS" ]; then need+=("$OPA" "$OUT/peers/opa/data.json"); fi
for f in "${need[@]}"; do
	[ -e "$f" ] || { echo "bench-wrk: $f is missing (run make build and make bench-peers first)" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "bench-wrk: wrk is not installed (apt-get install wrk)" >&2; exit 2; }
command -v taskset >/dev/null || { echo "bench-wrk: taskset is not installed" >&2; exit 2; }

# The request bodies, one per line, for each interface and workload:
# the Zipf checks (the first N) and, when the data set has them, the
# rbac and rebac3 gate files: INTERFACE-WORKLOAD.txt (allowed-rbac.txt).
python3 - "$DATA" "$N" "$WORK" <<'EOF'
import json, os, sys
data, n, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def line(f, v):
    f.write(json.dumps(v, separators=(",", ":")) + "\n")
for w, src in (("zipf", "zipf-s1.1.ndjson"), ("rbac", "gate-rbac.ndjson"), ("rebac3", "gate-rebac3.ndjson")):
    if not os.path.exists(os.path.join(data, src)):
        continue
    checks = []
    with open(os.path.join(data, src)) as f:
        for l in f:
            if len(checks) == n:
                break
            checks.append(json.loads(l))
    with open("%s/allowed-%s.txt" % (work, w), "w") as a, open("%s/authzen-%s.txt" % (work, w), "w") as z, open("%s/opa-%s.txt" % (work, w), "w") as o:
        for c in checks:
            line(a, {"user": c["user"], "action": c["action"],
                     "resource": {"type": c["type"], "key": c["id"], "tenant": c["tenant"]}})
            line(z, {"subject": {"type": "user", "id": c["user"]}, "action": {"name": c["action"]},
                     "resource": {"type": c["type"], "id": c["id"], "properties": {"tenant": c["tenant"]}}})
            line(o, {"input": {k: c[k] for k in ("user", "action", "type", "id", "tenant")}})
    with open("%s/expected-%s.txt" % (work, w), "w") as e:
        for c in checks:
            e.write("true\n" if c["allow"] else "false\n")
EOF
head -n 1 "$WORK/allowed-zipf.txt" >"$WORK/allowed-one.txt"

cat >"$WORK/bodies.lua" <<'EOF'
local bodies, i = {}, 0
function init(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
end
function request()
  i = i % #bodies + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[i])
end
EOF

hits() { # "hits decisions" from nexus' metrics on the admin port, or "0 0"
	{ curl -s "http://127.0.0.1:$((PORT + 1))/metrics" 2>/dev/null || true; } |
		awk '/^nexus_decision_duration_seconds_count/ { t += $2; if ($0 ~ /cache="hit"/) h += $2 } END { print h + 0, t + 0 }'
}

# verify PORT PATH BODIES ALL_ALLOWED: the first 500 checks must get the
# data set's answers (every one allowed, for the allow-only policy).
verify() {
	local w=${3##*-}
	python3 - "$1" "$2" "$3" "$WORK/expected-$w" "$4" <<'EOF'
import json, sys, urllib.request
port, path, bodies, expected, all_allowed = sys.argv[1:]
want = [l.strip() == "true" for l in open(expected)]
for i, body in enumerate(open(bodies)):
    if i == 500:
        break
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=body.encode(), headers={"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req))
    got = out.get("allow", out.get("decision", out.get("result")))
    exp = True if all_allowed == "yes" else want[i]
    if got is not exp:
        sys.exit("bench-wrk: check %d on %s: got %s, want %s: %s" % (i, path, got, exp, body.strip()))
EOF
}

cpu() { # CPU seconds of process $1
	awk -v t="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); split($0, f, " "); print (f[12] + f[13]) / t }' "/proc/$1/stat"
}

wait_port() {
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-wrk: nothing listens on port $1" >&2
	return 1
}

# run NAME PORT PATH BODIES CMD...: starts CMD on CPU 0, checks its
# answers, loads it with wrk on CPU 1, prints NAME, checks/s and server
# CPU µs per check.
run() {
	local name=$1 port=$2 path=$3 bodies=$4
	shift 4
	taskset -c 0 "$@" >"$WORK/$name.log" 2>&1 &
	local pid=$!
	wait_port "$port"
	local all=no
	case $name in *allow-only*) all=yes ;; esac
	if [ "$bodies" != "$WORK/allowed-one.txt" ]; then verify "$port" "$path" "$bodies" "$all"; fi
	# Warm up: the first requests pay for page faults and compilation.
	taskset -c 1 wrk -t1 -c16 -d2s -s "$WORK/bodies.lua" "http://127.0.0.1:$port$path" -- "$bodies" >/dev/null
	local c0 c1 out reqs h0 h1
	h0=$(hits)
	c0=$(cpu "$pid")
	out=$(taskset -c 1 wrk -t1 -c16 -d"${DURATION}s" -s "$WORK/bodies.lua" "http://127.0.0.1:$port$path" -- "$bodies")
	c1=$(cpu "$pid")
	h1=$(hits)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	reqs=$(echo "$out" | awk '/requests in/ { print $1 }')
	if echo "$out" | grep -q "Non-2xx"; then
		echo "bench-wrk: $name answered errors:" >&2
		echo "$out" >&2
		exit 1
	fi
	awk -v n="$name" -v r="$reqs" -v d="$DURATION" -v c0="$c0" -v c1="$c1" -v h0="$h0" -v h1="$h1" \
		'BEGIN { split(h0, a, " "); split(h1, b, " "); hr = "-"; if (b[2] > a[2]) hr = sprintf("%.2f", (b[1] - a[1]) / (b[2] - a[2]))
			printf "%-24s %9.0f checks/s %7.1f µs of server CPU a check, hit ratio %s\n", n, r / d, (c1 - c0) / r * 1e6, hr }' | tee -a "$WORK/results.txt"
}

PORT=18181
NEXUS=("$BIN" serve --schema "$DATA/schema.yaml" --decision-log /dev/null --log-level error
	--trusted-subject-header x-user --app-api-insecure
	--grpc-addr 127.0.0.1:0 --admin-addr "127.0.0.1:$((PORT + 1))" --admin-insecure --http-addr "127.0.0.1:$PORT")
OPA_CMD=("$OPA" run --server --addr "127.0.0.1:$PORT" --log-level error "$OUT/peers/opa/nexusbench.rego" "$OUT/peers/opa/data.json")
cp -r "$NEXUS_DATA" "$WORK/nexus-data"
mkdir -p "$WORK/empty"
echo "wrk, 16 connections, ${DURATION}s a run, the first $N checks of the Zipf workload (s=1.1) and the rbac and rebac3 gate files; the server alone on CPU 0, wrk on CPU 1"
for r in $(seq 1 "$ROUNDS"); do
	run "nexus-cached-1-check" $PORT /allowed "$WORK/allowed-one.txt" "${NEXUS[@]}" --data-dir "$WORK/nexus-data"
	run "nexus-cached" $PORT /allowed "$WORK/allowed-zipf.txt" "${NEXUS[@]}" --data-dir "$WORK/nexus-data"
	run "nexus-no-cache" $PORT /allowed "$WORK/allowed-zipf.txt" "${NEXUS[@]}" --data-dir "$WORK/nexus-data" --no-cache
	run "nexus-authzen-no-cache" $PORT /access/v1/evaluation "$WORK/authzen-zipf.txt" "${NEXUS[@]}" --data-dir "$WORK/nexus-data" --no-cache
	run "nexus-allow-only" $PORT /allowed "$WORK/allowed-zipf.txt" "${NEXUS[@]}" --data-dir "$WORK/empty" --no-cache --policy "$OUT/peers/allowall"
	run "nexus-authzen-allow-only" $PORT /access/v1/evaluation "$WORK/authzen-zipf.txt" "${NEXUS[@]}" --data-dir "$WORK/empty" --no-cache --policy "$OUT/peers/allowall"
	if [ -n "$PEERS" ]; then
		run "opa" $PORT /v1/data/nexusbench/allow "$WORK/opa-zipf.txt" "${OPA_CMD[@]}"
	fi
	# The gate files: 1,000 checks each, so nexus runs without its cache.
	for w in rbac rebac3; do
		[ -e "$WORK/allowed-$w.txt" ] || continue
		run "nexus-no-cache-$w" $PORT /allowed "$WORK/allowed-$w.txt" "${NEXUS[@]}" --data-dir "$WORK/nexus-data" --no-cache
		if [ -n "$PEERS" ]; then
			run "opa-$w" $PORT /v1/data/nexusbench/allow "$WORK/opa-$w.txt" "${OPA_CMD[@]}"
		fi
	done
done
echo "medians over $ROUNDS rounds:"
python3 - "$WORK/results.txt" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], []).append((float(f[1]), float(f[3]), f[-1]))
for name, rs in runs.items():
    print("%-24s %9.0f checks/s %7.1f µs of server CPU a check (%.1f to %.1f), hit ratio %s" % (
        name, statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs),
        min(r[1] for r in rs), max(r[1] for r in rs), "/".join(r[2] for r in rs)))
EOF
