# nexus: build, test, check and benchmark.
#
# `make test` is what CI runs (.ci/run). It installs what the tests need
# (Debian packages via apt-get when run as root), runs `make check`
# (gofmt, go vet, staticcheck, go mod tidy) and then runs every test.

GO        ?= go
BIN       ?= bin/nexus
BENCH_BIN ?= bin/nexus-bench
PKGS      ?= ./...
# TAGS are the build tags of the binary and of the tests. vtprotobuf
# compiles go-control-plane's generated protobuf encoders, which the
# ext_authz gRPC server answers with (protobuf-go's reflection without it);
# `make check` vets both builds.
TAGS      ?= vtprotobuf
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/nexuspdp/nexus/internal/version.Version=$(VERSION)

.PHONY: all build build-bench test test-go deps check bench bench-large bench-peers bench-go bench-suite plugin clean

all: build

build:
	$(GO) build -tags '$(TAGS)' -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nexus

# build-bench builds the benchmark lab, a module of its own (bench/).
build-bench:
	cd bench && $(GO) build -tags '$(TAGS)' -trimpath -o $(CURDIR)/$(BENCH_BIN) ./cmd/nexus-bench

# deps installs the third-party programs the end-to-end tests drive.
deps:
	@./scripts/deps.sh

# E2E_NOTES collects the one-line reasons of e2e tests that skip (no Docker
# engine for the compose test), printed after the run: go test shows a
# passing package's output only with -v.
E2E_NOTES := $(CURDIR)/e2e/.test-notes

# envoygrpc's CheckResponse encoder differs by tag: its tests also run
# without TAGS.
test: deps build check
	$(GO) test -tags '$(TAGS)' -race -count=1 -timeout 15m $(PKGS)
	$(GO) test -tags '$(TAGS)' -count=1 -run 'TestDefaultPolicyMatchesReference' ./pdp/
	$(GO) test -race -count=1 ./extauthz/internal/envoygrpc/
	cd bench && $(GO) test -tags '$(TAGS)' -race -count=1 -timeout 15m ./...
	@rm -f $(E2E_NOTES)
	cd e2e && NEXUS_REQUIRE_TOOLS=1 NEXUS_TEST_NOTES=$(E2E_NOTES) $(GO) test -tags '$(TAGS)' -count=1 -timeout 30m ./...; s=$$?; cat $(E2E_NOTES) 2>/dev/null; rm -f $(E2E_NOTES); exit $$s

check:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet -tags '$(TAGS)' $(PKGS)
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck -tags '$(TAGS)' $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	$(GO) mod tidy
	cd bench && $(GO) vet -tags '$(TAGS)' ./... && $(GO) tool staticcheck -tags '$(TAGS)' ./... && $(GO) mod tidy
	@git diff --exit-code -- go.mod go.sum bench/go.mod bench/go.sum || (echo "go mod tidy changed go.mod/go.sum"; exit 1)

# bench-go runs the Go benchmarks beside the code.
bench-go:
	$(GO) test -tags '$(TAGS)' -run '^$$' -bench . -benchmem $(PKGS)

# bench-suite runs BenchmarkSuite (extauthz) on every policy of
# bench/suite/policies: nexus in process with the cache off, OPA on
# pre-parsed input and OPA on input converted as opa-envoy-plugin does,
# three interleaved rounds; the table of medians lands in
# $(BENCH_OUT)/suite/suite.md (see docs/bench/suite.md). About 4 minutes.
bench-suite:
	BENCH_SUITE_OUT=$(BENCH_OUT)/suite ./scripts/bench-suite.sh

# bench runs Permit's published Nexus PDP method on the small data set
# (gen, gate, latency and capacity for RBAC and ReBAC depth 0-3 over gRPC,
# RBAC and depth 3 over /allowed and AuthZEN, each next to an allow-only
# baseline) with short windows, then the gateway run (real nginx and
# Caddy in front of nexus, the Zipf workload at 100 requests/s, three
# rounds of 20 s against an allow-only nexus), then the policy suite
# (bench-suite): about 25 minutes on 2 cores. Reports land in
# $(BENCH_OUT)/report.md and report.json, $(BENCH_OUT)/gateway/ and
# $(BENCH_OUT)/suite/ (see BENCHMARKS.md).
BENCH_OUT       ?= bench-out
BENCH_LARGE_OUT ?= bench-out-large
BENCH_FLAGS     ?= --warmup 3s --duration 20s --step 3s --start-rate 1000
GATEWAY_FLAGS   ?=
PEERS_FLAGS     ?=

bench: build build-bench
	$(BENCH_BIN) run --nexus $(BIN) --profile small --seed 1 --out $(BENCH_OUT) $(BENCH_FLAGS)
	$(BENCH_BIN) gateway --nexus $(BIN) --profile small --seed 1 --data $(BENCH_OUT)/data --out $(BENCH_OUT)/gateway $(GATEWAY_FLAGS)
	BENCH_SUITE_OUT=$(BENCH_OUT)/suite ./scripts/bench-suite.sh

# bench-peers installs OPA and OpenFGA (scripts/bench-peers.sh), runs nexus
# (cache on and off, /allowed and gRPC), OPA, OpenFGA, the allow-only nexus
# and the transport floor side by side on the Zipf, RBAC and ReBAC depth 3
# workloads in three interleaved rounds, then the gateway run, and prints
# the tables BENCHMARKS.md shows: about 40 minutes on 2 cores.
bench-peers: build build-bench
	./scripts/bench-peers.sh
	$(BENCH_BIN) peers --nexus $(BIN) --profile small --seed 1 --data $(BENCH_OUT)/data --out $(BENCH_OUT)/peers $(PEERS_FLAGS)
	$(BENCH_BIN) gateway --nexus $(BIN) --profile small --seed 1 --data $(BENCH_OUT)/data --out $(BENCH_OUT)/gateway $(GATEWAY_FLAGS)

# bench-large does the same on the 20-million-tuple data set (generated
# and imported once into $(BENCH_LARGE_OUT); about 1 GB of disk).
bench-large: build build-bench
	$(BENCH_BIN) run --nexus $(BIN) --profile large --seed 1 --out $(BENCH_LARGE_OUT) $(BENCH_FLAGS)

# plugin builds the proxy-wasm edge filter with the standard Go toolchain as a
# WASI reactor (no TinyGo); its tests build their own copy.
plugin:
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o plugin/plugin.wasm ./plugin

clean:
	rm -rf bin plugin/plugin.wasm $(BENCH_OUT) $(BENCH_LARGE_OUT)
