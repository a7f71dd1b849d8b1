#!/usr/bin/env bash
# A local 3-node Writ ledger cluster on loopback.
#   deploy/local-cluster.sh up      start nodes 1..3 (node 1 bootstraps all three)
#   deploy/local-cluster.sh status  cluster status through the admin API
#   deploy/local-cluster.sh down    stop the nodes (data is kept under .writ/cluster)
# Writes .writ/cluster/env with WRIT_ADMIN_URL, WRIT_ADMIN_TOKEN, WRIT_NODE_URLS and PIDs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${WRIT_CLUSTER_DIR:-.writ/cluster}
BIN=${WRIT_BIN:-target/debug/writ}
BASE_PORT=${WRIT_CLUSTER_BASE_PORT:-7101}
N=3

url() { echo "http://127.0.0.1:$((BASE_PORT + $1 - 1))"; }

up() {
  [ -x "$BIN" ] || { echo "missing $BIN: run 'cargo build -p writ-node' (or make build)" >&2; exit 1; }
  mkdir -p "$ROOT"
  [ -s "$ROOT/operator-token" ] || { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/writ-op-/' > "$ROOT/operator-token"; chmod 600 "$ROOT/operator-token"; }
  token=$(cat "$ROOT/operator-token")
  pids=()
  for id in $(seq 1 $N); do
    dir="$ROOT/n$id"; mkdir -p "$dir"
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "node $id already running (pid $(cat "$dir/pid"))"; pids+=("$(cat "$dir/pid")"); continue
    fi
    {
      echo "node_id = $id"
      echo "listen = \"127.0.0.1:$((BASE_PORT + id - 1))\""
      echo "data_dir = \"$dir/data\""
      echo "operator_token_file = \"$ROOT/operator-token\""
      [ "$id" = 1 ] && echo "bootstrap = true" || echo "bootstrap = false"
      for m in $(seq 1 $N); do printf '[[members]]\nid = %s\naddr = "%s"\n' "$m" "$(url "$m")"; done
    } > "$dir/node.toml"
    nohup "$BIN" node --config "$dir/node.toml" >> "$dir/node.log" 2>&1 &
    echo $! > "$dir/pid"; pids+=("$!")
    echo "node $id: $(url "$id") (pid $!, log $dir/node.log)"
  done
  for _ in $(seq 1 100); do
    curl -sf "$(url 1)/readyz" >/dev/null 2>&1 && break; sleep 0.2
  done
  urls=$(for id in $(seq 1 $N); do printf '%s ' "$(url "$id")"; done)
  cat > "$ROOT/env" <<ENV
export WRIT_ADMIN_URL=$(url 1)
export WRIT_ADMIN_TOKEN=$token
export WRIT_NODE_URLS="${urls% }"
export WRIT_NODE_PIDS="${pids[*]}"
ENV
  echo "cluster up; next: source $ROOT/env && $BIN admin cluster status"
}

down() {
  for id in $(seq 1 $N); do
    f="$ROOT/n$id/pid"
    if [ -f "$f" ]; then kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; echo "node $id stopped"; fi
  done
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
