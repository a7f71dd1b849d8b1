#!/usr/bin/env bash
# A local 3-node Writ ledger cluster and two MCP edges on loopback.
#   deploy/local-cluster.sh up      start nodes 1..3 (node 1 bootstraps all three), then edges 1..2
#   deploy/local-cluster.sh status  cluster status through the admin API
#   deploy/local-cluster.sh down    stop edges and nodes (data is kept under .writ/cluster)
# Every node serves TLS with a credential from the cluster's own CA (.writ/cluster/pki, made
# with `writ pki`); edges reach the nodes' client API with an edge credential from it.
# Writes .writ/cluster/env with WRIT_ADMIN_URL, WRIT_ADMIN_TOKEN, WRIT_CA_FILE, WRIT_NODE_URLS, WRIT_MCP_URL
# (the edges' shared canonical URL: the token audience), WRIT_MCP_URLS, WRIT_EXECUTOR_URLS (the
# edges' executor endpoints) and PIDs. Both edges share one seal key file, as replicas behind
# one load balancer must. WRIT_CLUSTER_RAFT (optional) is TOML lines for each node's [raft]
# section, e.g. WRIT_CLUSTER_RAFT='snapshot_every_entries = 11500' (the keys: node/src/config.rs).
# WRIT_EDGE_ALLOCATOR (default mimalloc) is the edges' WRIT_ALLOCATOR; set it empty for the system
# allocator, which heap profilers such as heaptrack see into.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${WRIT_CLUSTER_DIR:-.writ/cluster}
BIN=${WRIT_BIN:-target/debug/writ}
BASE_PORT=${WRIT_CLUSTER_BASE_PORT:-7101}
EDGE_BASE_PORT=${WRIT_CLUSTER_EDGE_BASE_PORT:-8101}
EXECUTOR_BASE_PORT=${WRIT_CLUSTER_EXECUTOR_BASE_PORT:-9101}
N=3
EDGES=2

url() { echo "https://127.0.0.1:$((BASE_PORT + $1 - 1))"; }
edge_url() { echo "http://127.0.0.1:$((EDGE_BASE_PORT + $1 - 1))/mcp"; }

up() {
  [ -x "$BIN" ] || { echo "missing $BIN: run 'cargo build -p writ-node' (or make build)" >&2; exit 1; }
  mkdir -p "$ROOT"
  [ -s "$ROOT/operator-token" ] || { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/writ-op-/' > "$ROOT/operator-token"; chmod 600 "$ROOT/operator-token"; }
  token=$(cat "$ROOT/operator-token")
  PKI="$ROOT/pki"
  [ -s "$PKI/ca.pem" ] || "$BIN" pki init --dir "$PKI" >/dev/null
  CA=$(cd "$PKI" && pwd)/ca.pem
  issue() { [ -s "$PKI/$1-$2.pem" ] || "$BIN" pki issue "$1" "$2" --dir "$PKI" --host 127.0.0.1 --host localhost >/dev/null; }
  pids=()
  for id in $(seq 1 $N); do
    dir="$ROOT/n$id"; mkdir -p "$dir"
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "node $id already running (pid $(cat "$dir/pid"))"; pids+=("$(cat "$dir/pid")"); continue
    fi
    issue node "$id"
    {
      echo "node_id = $id"
      echo "listen = \"127.0.0.1:$((BASE_PORT + id - 1))\""
      echo "data_dir = \"$dir/data\""
      echo "operator_token_file = \"$ROOT/operator-token\""
      [ "$id" = 1 ] && echo "bootstrap = true" || echo "bootstrap = false"
      for m in $(seq 1 $N); do printf '[[members]]\nid = %s\naddr = "%s"\n' "$m" "$(url "$m")"; done
      printf '[tls]\ncert = "%s"\nkey = "%s"\nca = "%s"\n' "$PKI/node-$id.pem" "$PKI/node-$id-key.pem" "$CA"
      [ -z "${WRIT_CLUSTER_RAFT:-}" ] || printf '[raft]\n%s\n' "$WRIT_CLUSTER_RAFT"
    } > "$dir/node.toml"
    nohup "$BIN" node --config "$dir/node.toml" >> "$dir/node.log" 2>&1 &
    echo $! > "$dir/pid"; pids+=("$!")
    echo "node $id: $(url "$id") (pid $!, log $dir/node.log)"
  done
  for _ in $(seq 1 100); do
    curl -sf --cacert "$CA" "$(url 1)/readyz" >/dev/null 2>&1 && break; sleep 0.2
  done
  urls=$(for id in $(seq 1 $N); do printf '%s ' "$(url "$id")"; done)
  ledger=$(for id in $(seq 1 $N); do printf '"%s", ' "$(url "$id")"; done)
  edge_pids=()
  for e in $(seq 1 $EDGES); do
    dir="$ROOT/e$e"; mkdir -p "$dir"
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "edge $e already running (pid $(cat "$dir/pid"))"; edge_pids+=("$(cat "$dir/pid")"); continue
    fi
    issue edge "e$e"
    {
      echo "listen = \"127.0.0.1:$((EDGE_BASE_PORT + e - 1))\""
      echo "canonical_url = \"$(edge_url 1)\""
      echo "ledger = [${ledger%, }]"
      echo "seal_key_file = \"$ROOT/edge-seal-key\""
      echo "[executor]"
      echo "listen = \"127.0.0.1:$((EXECUTOR_BASE_PORT + e - 1))\""
      printf '[ledger_tls]\ncert = "%s"\nkey = "%s"\nca = "%s"\n' "$PKI/edge-e$e.pem" "$PKI/edge-e$e-key.pem" "$CA"
    } > "$dir/edge.toml"
    WRIT_ALLOCATOR=${WRIT_EDGE_ALLOCATOR-mimalloc} nohup "$BIN" edge --config "$dir/edge.toml" >> "$dir/edge.log" 2>&1 &
    echo $! > "$dir/pid"; edge_pids+=("$!")
    echo "edge $e: $(edge_url "$e") (pid $!, log $dir/edge.log)"
    # The first edge creates the shared seal key; the next one reads it.
    for _ in $(seq 1 50); do [ -s "$ROOT/edge-seal-key" ] && break; sleep 0.1; done
  done
  mcp_urls=$(for e in $(seq 1 $EDGES); do printf '%s ' "$(edge_url "$e")"; done)
  executor_urls=$(for e in $(seq 1 $EDGES); do printf 'https://127.0.0.1:%s ' "$((EXECUTOR_BASE_PORT + e - 1))"; done)
  # The env file holds the operator token: readable by its owner only.
  (umask 077; : > "$ROOT/env")
  cat > "$ROOT/env" <<ENV
export WRIT_ADMIN_URL=$(url 1)
export WRIT_ADMIN_TOKEN=$token
export WRIT_CA_FILE=$CA
export WRIT_NODE_URLS="${urls% }"
export WRIT_NODE_PIDS="${pids[*]}"
export WRIT_MCP_URL=$(edge_url 1)
export WRIT_MCP_URLS="${mcp_urls% }"
export WRIT_EDGE_PIDS="${edge_pids[*]}"
export WRIT_EXECUTOR_URLS="${executor_urls% }"
ENV
  echo "cluster up; next: source $ROOT/env && $BIN admin cluster status"
}

# stop NAME PIDFILE: SIGTERM, wait up to 10 s for the exit, then SIGKILL; removes the pid file.
stop() {
  local name=$1 f=$2 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; echo "$name killed (no exit 10 s after SIGTERM)"; fi
  fi
  rm -f "$f"; echo "$name stopped"
}

# Edges first, while the ledger can still take their last audit decisions.
down() {
  for e in $(seq 1 $EDGES); do stop "edge $e" "$ROOT/e$e/pid"; done
  for id in $(seq 1 $N); do stop "node $id" "$ROOT/n$id/pid"; done
}

status() {
  # shellcheck disable=SC1091
  source "$ROOT/env"
  "$BIN" admin cluster status
}

case "${1:-}" in
  up) up ;; down) down ;; status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
