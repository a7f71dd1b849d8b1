# Writ: the two quickstart commands are `make dev` and `make test`.
# Both install what a fresh machine lacks (see `deps`), so CI and humans run the same thing.

CARGO ?= cargo
SUDO := $(shell [ "$$(id -u)" = "0" ] || echo sudo)

.PHONY: dev test deps pydeps build lint docs cluster-up cluster-down clean

SCHEMATHESIS_VERSION := 4.32.5

## deps: system packages the build needs (libclang for the rocksdb crate's bindgen, a C++ compiler).
deps:
	@missing=""; \
	dpkg -s libclang-dev >/dev/null 2>&1 || missing="$$missing libclang-dev"; \
	command -v c++ >/dev/null || missing="$$missing g++"; \
	command -v curl >/dev/null || missing="$$missing curl"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo is required (rustup.rs)"; exit 1; }

# Every build selects the whole workspace: a narrower selection (e.g. `-p writ-node`) unifies
# features differently and would rebuild RocksDB's C++ from scratch (~30 min on 2 cores).
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)

build: deps
	$(CARGO) build --workspace --bins

## dev: build and start `writ dev` (single-node ledger + admin API on loopback).
dev: build
	$(TARGET_DIR)/debug/writ dev

# clippy checks without linking, so it is pointed at a (never linked) prebuilt-library dir:
# that keeps its separate librocksdb-sys build unit from compiling RocksDB's C++ again.
lint: deps
	$(CARGO) fmt --all -- --check
	ROCKSDB_LIB_DIR=$(CURDIR)/target/clippy-no-link $(CARGO) clippy --workspace --all-targets -- -D warnings

## pydeps: Python tools the tests drive (schemathesis against the admin API's OpenAPI document).
pydeps:
	@schemathesis --version 2>/dev/null | grep -q "$(SCHEMATHESIS_VERSION)" || \
	  python3 -m pip install --quiet --disable-pip-version-check "schemathesis==$(SCHEMATHESIS_VERSION)"

## test: the whole suite (what CI runs): lint, then every crate's tests, cluster tests included.
test: lint build pydeps
	$(CARGO) test --workspace

## docs: regenerate generated docs (docs/reasons.md) and bless new golden encodings.
docs:
	WRIT_BLESS=1 $(CARGO) test -p writ-api

cluster-up: build
	deploy/local-cluster.sh up

cluster-down:
	deploy/local-cluster.sh down

clean:
	$(CARGO) clean
	rm -rf .writ
