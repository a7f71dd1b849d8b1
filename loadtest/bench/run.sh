#!/usr/bin/env bash
# `make bench` (SPEC P1–P4; docs/performance.md): a 3-node Writ cluster + 2 edges
# (deploy/local-cluster.sh, release build), a 3-node etcd cluster on loopback (fsync on, as
# etcd always does) and the bare rmcp baseline, all on this machine, measured by the same
# generator (writ-loadtest), alternating systems point by point. Writes
# loadtest/bench/results/latest.json (every figure) and latest.md (the tables with ratios).
#
# Knobs (environment): BENCH_SECONDS per point (8), BENCH_CLIENTS P1 levels ("1 16 64 256"),
# BENCH_CONNECTIONS P2 levels ("1 16 64"), BENCH_IDLE_TENANTS (10000), BENCH_AUDIT_EVENTS
# (1000000), BENCH_OUT (loadtest/bench/results), BENCH_BUILD=0 (use the release binaries
# already built), BENCH_SCENARIOS ("p1 p1w p2 p3 p4 p5": which to run; p1w is the whole operation,
# the client waiting for the effect report, against the same workflow built on etcd).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=loadtest/bench/lib.sh
source loadtest/bench/lib.sh
SECONDS_PER_POINT=${BENCH_SECONDS:-8}
CLIENTS=${BENCH_CLIENTS:-"1 16 64 256"}
CONNECTIONS=${BENCH_CONNECTIONS:-"1 16 64"}
IDLE_TENANTS=${BENCH_IDLE_TENANTS:-10000}
AUDIT_EVENTS=${BENCH_AUDIT_EVENTS:-1000000}
SCENARIOS=" ${BENCH_SCENARIOS:-p1 p1w p2 p3 p4 p5} "
runs() { [[ $SCENARIOS == *" $1 "* ]]; }
WORK=$(mktemp -d /tmp/writ-bench.XXXXXX)
RAW=$OUT/raw
mkdir -p "$RAW"
rm -f "$RAW"/*.json "$RAW"/*.txt
LT=$BIN/writ-loadtest
ETCD_PIDS=()
BASE_PID=
WIDE_PID=
SINK_PID=
started=$(date +%s)

log() { echo "== [$(( $(date +%s) - started ))s] $*" >&2; }

# What this script starts besides the Writ cluster (lib.sh's bench_cleanup stops that one).
on_exit() {
  [ -n "$BASE_PID" ] && kill "$BASE_PID" 2>/dev/null
  [ -n "$WIDE_PID" ] && kill "$WIDE_PID" 2>/dev/null
  [ -n "$SINK_PID" ] && kill "$SINK_PID" 2>/dev/null
  for p in "${ETCD_PIDS[@]}"; do kill "$p" 2>/dev/null; done
}
trap bench_cleanup EXIT

# --- build and start everything -------------------------------------------------------------
command -v etcd >/dev/null || {
  log "installing etcd-server"
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq etcd-server >/dev/null
}
command -v protoc >/dev/null || { # etcd-client (the gRPC baseline) compiles etcd's protos
  log "installing protobuf-compiler"
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
}
command -v openssl >/dev/null || { # certificates of etcd's TLS listeners
  log "installing openssl"
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssl >/dev/null
}
if [ "${BENCH_BUILD:-1}" = 1 ]; then
  log "release build"
  cargo build --release --workspace --bins
  for baseline in rmcp-greet etcd-grpc; do
    cargo build --release --manifest-path "loadtest/baselines/$baseline/Cargo.toml" --target-dir "$TARGET/baselines"
  done
fi
BASELINE=$TARGET/baselines/release/rmcp-greet
ETCD_GRPC=$TARGET/baselines/release/etcd-grpc-load
build_s=$(( $(date +%s) - started ))
started=$(date +%s)

# etcd_tls DIR: a CA, a server certificate for 127.0.0.1 and a client certificate (ECDSA P-256,
# as Writ's), for the members' TLS client listeners that check client certificates.
etcd_tls() {
  local d=$1 name
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=writ-bench-etcd-ca \
    -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
  for name in server client; do
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=writ-bench-$name" \
      -keyout "$d/$name.key" -out "$d/$name.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=%sAuth\n' "$name" > "$d/$name.ext"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
      -extfile "$d/$name.ext" -out "$d/$name.pem" 2>/dev/null
  done
}
ETCD_TLS=$WORK/etcd-tls
etcd_tls "$ETCD_TLS"

log "etcd: 3 members on loopback (plain client listeners, and TLS ones checking client certificates)"
ETCD_URLS=""
ETCD_TLS_URLS=""
CLUSTER=""
for i in 1 2 3; do CLUSTER+="e$i=http://127.0.0.1:$((23800 + i)),"; done
# start_etcd I: member I (a restarted member finds its data and rejoins).
start_etcd() {
  local i=$1
  etcd --name "e$i" --data-dir "$WORK/etcd$i" \
    --listen-client-urls "http://127.0.0.1:$((23790 + i)),https://127.0.0.1:$((23770 + i))" \
    --advertise-client-urls "http://127.0.0.1:$((23790 + i)),https://127.0.0.1:$((23770 + i))" \
    --cert-file "$ETCD_TLS/server.pem" --key-file "$ETCD_TLS/server.key" \
    --trusted-ca-file "$ETCD_TLS/ca.pem" --client-cert-auth \
    --listen-peer-urls "http://127.0.0.1:$((23800 + i))" --initial-advertise-peer-urls "http://127.0.0.1:$((23800 + i))" \
    --initial-cluster "${CLUSTER%,}" --initial-cluster-state new --initial-cluster-token writ-bench \
    --log-level error >> "$WORK/etcd$i.log" 2>&1 &
  ETCD_PIDS[$((i - 1))]=$!
}
etcd_healthy() {
  for _ in $(seq 1 150); do
    [ "$(for i in 1 2 3; do curl -sf "http://127.0.0.1:$((23790 + i))/health"; echo; done | grep -c true)" = 3 ] && return
    sleep 0.2
  done
  echo "etcd did not become healthy" >&2
}
for i in 1 2 3; do
  start_etcd "$i"
  ETCD_URLS+="http://127.0.0.1:$((23790 + i)) "
  ETCD_TLS_URLS+="https://127.0.0.1:$((23770 + i)) "
done
export WRIT_ETCD_URLS=${ETCD_URLS% }
etcd_healthy

log "writ: 3 nodes + 2 edges (release)"
export WRIT_BIN=$BIN/writ WRIT_CLUSTER_DIR=$WORK/writ
writ_up

log "bare rmcp baseline"
"$BASELINE" 127.0.0.1:0 > "$WORK/baseline.url" 2>"$WORK/baseline.log" &
BASE_PID=$!
for _ in $(seq 1 50); do [ -s "$WORK/baseline.url" ] && break; sleep 0.1; done
BASE_URL=$(head -1 "$WORK/baseline.url")
FIRST_EDGE=${WRIT_MCP_URLS%% *}
EDGE_PID=${WRIT_EDGE_PIDS%% *}

common=(--duration "$SECONDS_PER_POINT" --quiet)
failed=()
# point LABEL SYSTEM ARGS...: one measured run; a failed one (e.g. --verify) is reported, not fatal.
point() {
  local label=$1 system=$2; shift 2
  local extra=() run=("$LT" "$system")
  [ "$system" = writ ] && extra=(--work-dir "$WORK/executors")
  [ "$system" = etcd-grpc ] && run=("$ETCD_GRPC")
  "${run[@]}" "${extra[@]}" --label "$label" --json "$RAW/$label.json" "$@" || {
    echo "!! $label exited with status $?" >&2
    failed+=("$label")
  }
}

# --- P1 durable ------------------------------------------------------------------------------
runs p1 && TERM_BEFORE=$(writ_raft term) && LOG_BEFORE=$(writ_raft last_log_index)
runs p1 && for c in $CLIENTS; do
  log "P1 $c clients: writ operation.execute, then etcd txn put-if-absent over gRPC and over the gateway"
  point "p1-writ-c$c" writ "${common[@]}" --prefix p1 --concurrency "$c" --mix execute=1 --verify --drain 60 \
    --watch-pids "$WRIT_NODE_PIDS $WRIT_EDGE_PIDS"
  point "p1-etcdgrpc-c$c" etcd-grpc "${common[@]}" --concurrency "$c" --verify --watch-pids "${ETCD_PIDS[*]}"
  point "p1-etcd-c$c" etcd "${common[@]}" --concurrency "$c" --verify --watch-pids "${ETCD_PIDS[*]}"
done
# Leader changes while P1 ran (a tuning that causes spurious elections under load shows here).
# Raft entries written while P1 ran (with its verification and drain), per operation.
runs p1 && echo "{\"term_before\": $TERM_BEFORE, \"term_after\": $(writ_raft term), \"log_before\": $LOG_BEFORE, \"log_after\": $(writ_raft last_log_index)}" > "$RAW/p1-terms.txt"

# --- P1 workflow -----------------------------------------------------------------------------
# The whole operation on both sides, each client waiting for its effect report, three consensus
# writes each (Writ's simulated device takes no camera frame here): Writ's executor is counted
# with the servers; etcd's clients and worker speak TLS with client certificates.
runs p1w && for c in $CLIENTS; do
  log "P1 workflow $c clients: writ operation.execute waiting for the report, then the etcd workflow"
  point "p1w-writ-c$c" writ "${common[@]}" --prefix p1w --concurrency "$c" --mix execute=1 --wait-s 20 --no-camera \
    --verify --drain 60 --watch-pids "$WRIT_NODE_PIDS $WRIT_EDGE_PIDS"
  point "p1w-etcdwf-c$c" etcd-grpc "${common[@]}" --workflow --endpoints "${ETCD_TLS_URLS% }" \
    --cacert "$ETCD_TLS/ca.pem" --cert "$ETCD_TLS/client.pem" --key "$ETCD_TLS/client.key" \
    --concurrency "$c" --verify --watch-pids "${ETCD_PIDS[*]}"
done

# --- P2 read path ----------------------------------------------------------------------------
# A second rmcp baseline serving as many tools as the Writ edge lists (started after the first
# Writ discovery point, which records how many that is): the fair tools/list comparison.
WIDE_PID=
start_wide_baseline() {
  local n
  n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["setup"].get("tools_listed") or 1)' "$1")
  "$BASELINE" 127.0.0.1:0 "$n" > "$WORK/wide.url" 2>"$WORK/wide.log" &
  WIDE_PID=$!
  for _ in $(seq 1 50); do [ -s "$WORK/wide.url" ] && break; sleep 0.1; done
  WIDE_URL=$(head -1 "$WORK/wide.url")
  log "rmcp baseline with $n tools (as many as the writ edge lists)"
}
# An OTLP/HTTP sink for the traced points: takes every export, answers 200, keeps nothing (it
# shares the machine, so it decodes nothing); counts requests and bytes in $WORK/otlp.stats.
SINK_PID=
start_otlp_sink() {
  python3 - "$WORK/otlp.stats" > "$WORK/otlp.url" 2>"$WORK/otlp.log" <<'PY' &
import http.server, sys, threading
stats, lock, seen = sys.argv[1], threading.Lock(), [0, 0]
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            seen[0] += 1; seen[1] += len(body)
            open(stats, "w").write(f'{{"exports": {seen[0]}, "bytes": {seen[1]}}}')
        self.send_response(200); self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
PY
  SINK_PID=$!
  for _ in $(seq 1 50); do [ -s "$WORK/otlp.url" ] && break; sleep 0.1; done
  SINK_URL=$(head -1 "$WORK/otlp.url")
}
# edge_traced on|off: restarts the first edge exporting every request's spans to the sink
# (OTEL_* as every OpenTelemetry SDK reads them; sampling 1.0), or with tracing off.
edge_traced() {
  kill "$EDGE_PID"
  for _ in $(seq 1 100); do kill -0 "$EDGE_PID" 2>/dev/null || break; sleep 0.1; done
  if [ "$1" = on ]; then
    OTEL_EXPORTER_OTLP_ENDPOINT=$SINK_URL OTEL_TRACES_SAMPLER=always_on writ_up
  else
    writ_up
  fi
  EDGE_PID=${WRIT_EDGE_PIDS%% *}
  for _ in $(seq 1 150); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$FIRST_EDGE")" != 000 ] && return
    sleep 0.2
  done
  echo "the edge did not come back" >&2
}
runs p2 && start_otlp_sink
runs p2 && for c in $CONNECTIONS; do
  for kind in discover read; do
    log "P2 $c connections: $kind on one writ edge (tracing off, then on), then on the bare rmcp server"
    point "p2-writ-$kind-c$c" writ "${common[@]}" --prefix p2 --edges "$FIRST_EDGE" --concurrency "$c" \
      --mix "$kind=1" --watch-pids "$EDGE_PID"
    edge_traced on
    point "p2-writtraced-$kind-c$c" writ "${common[@]}" --prefix p2 --edges "$FIRST_EDGE" --concurrency "$c" \
      --mix "$kind=1" --watch-pids "$EDGE_PID"
    edge_traced off
    # The same through a session of the 2025 wire (one per tenant, `initialize` once).
    point "p2-writ25-$kind-c$c" writ "${common[@]}" --prefix p2 --edges "$FIRST_EDGE" --concurrency "$c" \
      --mix "$kind=1" --wire 2025-11-25 --watch-pids "$EDGE_PID"
    point "p2-mcp-$kind-c$c" mcp "${common[@]}" --url "$BASE_URL" --concurrency "$c" --mix "$kind=1" \
      --watch-pids "$BASE_PID"
    if [ "$kind" = discover ]; then
      [ -z "$WIDE_PID" ] && start_wide_baseline "$RAW/p2-writ-discover-c$c.json"
      point "p2-mcpwide-discover-c$c" mcp "${common[@]}" --url "$WIDE_URL" --concurrency "$c" --mix discover=1 \
        --watch-pids "$WIDE_PID"
    fi
  done
done

runs p2 && { cp "$WORK/otlp.stats" "$RAW/p2-otlp.txt" 2>/dev/null || echo "!! the OTLP sink took no export" >&2; }

# --- P5 federation --------------------------------------------------------------------------
# The bare rmcp server as a tenant's upstream: `greet` through a Writ edge (token, admission,
# the catalog's and the pinned schemas, the fuse, the audit) against `greet` on the upstream
# directly — the latency Writ adds and the edge's CPU per proxied call.
runs p5 && for c in 1 16; do
  log "P5 $c connections: greet through a writ edge to its upstream, then on the upstream directly"
  point "p5-writ-upstream-c$c" writ "${common[@]}" --prefix p5 --edges "$FIRST_EDGE" --concurrency "$c" \
    --mix read=1 --upstream "$BASE_URL" --watch-pids "$EDGE_PID"
  point "p5-mcp-direct-c$c" mcp "${common[@]}" --url "$BASE_URL" --concurrency "$c" --mix read=1 \
    --watch-pids "$BASE_PID"
done

# --- P3 failover (each killed member is restarted afterwards) -----------------------------
leader_pid() {
  local id
  id=$(curl -sf --cacert "$WRIT_CA_FILE" -H "Authorization: Bearer $WRIT_ADMIN_TOKEN" "$WRIT_ADMIN_URL/v1/cluster/status" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
  echo "$WRIT_NODE_PIDS" | cut -d' ' -f"$id"
}
etcd_leader() { # the member number (1..3) of the etcd leader
  local i
  for i in 1 2 3; do
    if curl -sf -X POST "http://127.0.0.1:$((23790 + i))/v3/maintenance/status" -d '{}' |
      python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if s["leader"] == s["header"]["member_id"] else 1)'; then
      echo "$i"; return
    fi
  done
}
if runs p3; then
log "P3 failover: 16 clients of execute, kill -9 of the writ leader after 5 s"
LEADER=$(leader_pid)
point p3-writ writ --duration 20 --quiet --prefix p3 --concurrency 16 --mix execute=1 --verify --drain 90 \
  --kill-after 5 --kill-cmd "kill -9 $LEADER"
log "P3 failover: 16 clients of txn, kill -9 of the etcd leader after 5 s"
ETCD_KILLED=$(etcd_leader)
LEADER=${ETCD_PIDS[$((ETCD_KILLED - 1))]}
point p3-etcd etcd --duration 20 --quiet --concurrency 16 --verify --kill-after 5 --kill-cmd "kill -9 $LEADER"

log "P3: restarting the killed members"
writ_up
start_etcd "$ETCD_KILLED"
etcd_healthy
fi

# --- P4 growth ------------------------------------------------------------------------------
p4() { # label extra-args...
  local label=$1; shift
  point "$label" writ "${common[@]}" --concurrency 64 --mix execute=1 --verify --drain 60 \
    --watch-pids "$WRIT_NODE_PIDS $WRIT_EDGE_PIDS" "$@"
}
if runs p4; then
log "P4 tenants: 64 clients with 1 tenant, then with $IDLE_TENANTS more"
p4 p4-tenants-1 --prefix p4t
p4 "p4-tenants-$IDLE_TENANTS" --prefix p4t --idle-tenants "$IDLE_TENANTS"
log "P4 audit: 64 clients on a fresh tenant, then after $AUDIT_EVENTS retained audit events"
p4 p4-audit-0 --prefix p4a
point p4-audit-seed writ --quiet --prefix p4a --concurrency 64 --mix read=1 --requests "$AUDIT_EVENTS" \
  --duration 3600
p4 "p4-audit-$AUDIT_EVENTS" --prefix p4a
fi

run_s=$(( $(date +%s) - started ))
log "report"
python3 loadtest/bench/report.py "$RAW" "$OUT" --build-s "$build_s" --run-s "$run_s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED points (see their verify section above): ${failed[*]}" >&2
  exit 1
fi
