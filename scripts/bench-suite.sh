#!/usr/bin/env bash
# Runs BenchmarkSuite (extauthz/suite_test.go) on every policy of
# bench/suite/policies: nexus' ext_authz handler in process with the
# decision cache off, OPA's evaluator on input already in OPA's form, and
# OPA on input converted from the CheckRequest as opa-envoy-plugin does.
# The three run one after the other for each policy, the policies one
# after the other, in ROUNDS rounds (default 3); the table gives each
# line's median over the rounds.
#
#   scripts/bench-suite.sh                   # writes bench-out/suite/suite.md
#   BENCH_SUITE_OUT=/tmp/s ROUNDS=5 BENCHTIME=2s scripts/bench-suite.sh
#   BENCH_SUITE_RUN='jwt' scripts/bench-suite.sh   # policies matching a regexp
set -euo pipefail

cd "$(dirname "$0")/.."
out="${BENCH_SUITE_OUT:-bench-out/suite}"
rounds="${ROUNDS:-3}"
benchtime="${BENCHTIME:-1s}"
run="${BENCH_SUITE_RUN:-.}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

go test -c -o "$out/extauthz.test" ./extauthz
for i in $(seq 1 "$rounds"); do
	echo "bench-suite: round $i of $rounds" >&2
	(cd extauthz && "$out/extauthz.test" -test.run '^$' -test.bench "^BenchmarkSuite/($run)/" \
		-test.benchtime "$benchtime" -test.benchmem) | tee "$out/round-$i.txt" >&2
done

{
	echo "| policy | nexus µs | OPA pre-parsed µs | OPA converted µs | pre-parsed / nexus | converted / nexus |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: |"
	awk -v rounds="$rounds" '
	function median(key,   n, i, j, t, v) {
		n = cnt[key]
		for (i = 1; i <= n; i++) v[i] = vals[key, i]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
		if (n % 2) return v[(n + 1) / 2]
		return (v[n / 2] + v[n / 2 + 1]) / 2
	}
	$1 ~ /^BenchmarkSuite\// && $4 == "ns/op" {
		split($1, part, "/")
		policy = part[2]; variant = part[3]; sub(/-[0-9]+$/, "", variant)
		if (!(policy in seen)) { seen[policy] = 1; order[++np] = policy }
		key = policy SUBSEP variant
		vals[key, ++cnt[key]] = $3 / 1000
	}
	END {
		for (i = 1; i <= np; i++) {
			p = order[i]
			n = median(p SUBSEP "nexus"); a = median(p SUBSEP "opa-preparsed"); c = median(p SUBSEP "opa-converted")
			printf "| %s | %.1f | %.1f | %.1f | %.1f× | %.1f× |\n", p, n, a, c, a / n, c / n
		}
	}' "$out"/round-*.txt
	echo
	echo "Medians of $rounds rounds of \`go test -bench BenchmarkSuite -benchtime $benchtime\` ($(go env GOOS)/$(go env GOARCH), $(nproc) CPUs, $(go version | cut -d' ' -f3), $(git rev-parse --short HEAD))."
} > "$out/suite.md"
cat "$out/suite.md"
