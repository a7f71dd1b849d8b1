#!/usr/bin/env bash
# SPEC P5, build and test time on this machine (docs/performance.md, "Build and test time"):
# from a fresh clone of HEAD with an empty cargo target directory,
#   1. `make dev` until its MCP edge answers (target ≤ 10 min),
#   2. the debug `writ` binary's size (≤ 150 MB),
#   3. a one-line change in the edge to a passing `cargo test -p writ-mcp-edge` (≤ 60 s),
#   4. with P5_TEST=1, `make test` from another empty target directory (≤ 20 min; ~30 min
#      of this machine, so not by default).
# The cargo registry (~/.cargo) is the machine's: crates already downloaded are not fetched
# again (P5_FRESH_REGISTRY=1 uses an empty CARGO_HOME and downloads them from crates.io too).
# Writes $BENCH_OUT/p5-build.json and p5-build.md (BENCH_OUT: loadtest/bench/results).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${BENCH_OUT:-$ROOT/loadtest/bench/results}
WORK=$(mktemp -d /tmp/writ-p5.XXXXXX)
DEV_PID=
mkdir -p "$OUT"

log() { echo "== [p5] $*" >&2; }

cleanup() {
  set +e
  [ -n "$DEV_PID" ] && kill -- -"$DEV_PID" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

git clone -q "$ROOT" "$WORK/clone"
commit=$(git -C "$WORK/clone" rev-parse --short HEAD)
if [ "${P5_FRESH_REGISTRY:-0}" = 1 ]; then
  export CARGO_HOME=$WORK/cargo-home
  mkdir -p "$CARGO_HOME"
  ln -s "$HOME/.cargo/bin" "$CARGO_HOME/bin"
fi

# 1. `make dev`, cold, until the edge answers.
export CARGO_TARGET_DIR=$WORK/target
cd "$WORK/clone"
log "cold make dev at $commit"
start=$(date +%s.%N)
setsid make dev DEV_ARGS="--listen 127.0.0.1:0 --edge-listen 127.0.0.1:0 --executor-listen 127.0.0.1:0" \
  >"$WORK/dev.log" 2>&1 &
DEV_PID=$!
deadline=$(( $(date +%s) + 1800 ))
serving=
while [ "$(date +%s)" -lt "$deadline" ] && kill -0 "$DEV_PID" 2>/dev/null; do
  if [ -f .writ/dev/env ]; then
    # shellcheck disable=SC1091
    url=$(. .writ/dev/env && echo "$WRIT_MCP_URL")
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' \
      -d '{"jsonrpc":"2.0","id":1,"method":"ping"}' "$url" || true)
    if [ "$code" != 000 ]; then serving=$(date +%s.%N); break; fi
  fi
  sleep 1
done
[ -n "$serving" ] || { tail -30 "$WORK/dev.log" >&2; log "make dev did not serve"; exit 1; }
dev_s=$(echo "$serving - $start" | bc)
kill -- -"$DEV_PID" 2>/dev/null || true
wait "$DEV_PID" 2>/dev/null || true
DEV_PID=
build_line=$(grep -E "Finished .dev. profile" "$WORK/dev.log" | tail -1 || true)
log "make dev served after ${dev_s}s ($build_line)"

# 2. The debug binary.
writ_bytes=$(stat -c %s "$CARGO_TARGET_DIR/debug/writ")

# 3. A one-line change in the edge, then its tests (the build of `make dev` is warm).
cargo test -q -p writ-mcp-edge --no-run >/dev/null 2>&1
echo "pub const ONE_LINE_CHANGE: u32 = 1;" >>mcp-edge/src/caps.rs
start=$(date +%s.%N)
cargo test -q -p writ-mcp-edge >"$WORK/edge-test.log" 2>&1
edge_s=$(echo "$(date +%s.%N) - $start" | bc)
git checkout -q mcp-edge/src/caps.rs
log "one-line change to passing edge tests: ${edge_s}s"

# 4. Optionally, the whole suite from another empty target directory.
test_s=null
if [ "${P5_TEST:-0}" = 1 ]; then
  export CARGO_TARGET_DIR=$WORK/target-test
  log "cold make test"
  start=$(date +%s.%N)
  make test >"$WORK/test.log" 2>&1 || { tail -40 "$WORK/test.log" >&2; log "make test failed"; exit 1; }
  test_s=$(echo "$(date +%s.%N) - $start" | bc)
  log "cold make test: ${test_s}s"
fi

cd "$ROOT"
cat >"$OUT/p5-build.json" <<EOF
{"commit": "$commit", "date": "$(date -u +%F)", "cores": $(nproc),
 "cold_make_dev_to_serving_s": $dev_s, "debug_writ_bytes": $writ_bytes,
 "edge_one_line_change_test_s": $edge_s, "cold_make_test_s": $test_s,
 "fresh_registry": ${P5_FRESH_REGISTRY:-0}}
EOF
python3 - "$OUT/p5-build.json" >"$OUT/p5-build.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def m(s): return "not run (P5_TEST=1)" if s is None else f"{int(s // 60)} m {s % 60:.0f} s"
print(f"# SPEC P5: build and test time ({r['date']}, at {r['commit']}, {r['cores']} cores)\n")
print("| what | target | measured |\n|---|---|---|")
print(f"| cold `make dev` to a serving edge | ≤ 10 min | {m(r['cold_make_dev_to_serving_s'])} |")
print(f"| debug `writ` binary | ≤ 150 MB | {r['debug_writ_bytes'] / 1e6:.1f} MB |")
print(f"| one-line edge change to passing `cargo test -p writ-mcp-edge` | ≤ 60 s | {r['edge_one_line_change_test_s']:.1f} s |")
print(f"| cold `make test` | ≤ 20 min | {m(r['cold_make_test_s'])} |")
reg = "an empty CARGO_HOME (every crate downloaded)" if r["fresh_registry"] else "the machine's cargo registry (crates already downloaded)"
print(f"\nFrom a fresh clone with an empty target directory and {reg}; `loadtest/bench/build.sh`.")
PY
cat "$OUT/p5-build.md"
