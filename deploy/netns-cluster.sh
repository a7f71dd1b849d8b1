#!/usr/bin/env bash
# Writ across hosts on one machine: each host is a network namespace with its own address on a
# bridge — three nodes (n1..n3), two edges (e1, e2) and an executor (x1) — with TLS everywhere
# and non-loopback binds. Needs root (ip netns) and iproute2.
#
#   deploy/netns-cluster.sh up | down | status
#   deploy/netns-cluster.sh partition leader         # isolate the current leader from every host
#   deploy/netns-cluster.sh partition edge N         # cut edge eN from every node
#   deploy/netns-cluster.sh partition asym A B       # host A can no longer send to host B
#   deploy/netns-cluster.sh heal                     # remove every partition
#   deploy/netns-cluster.sh restart HOST             # SIGTERM one node or edge, start it again
#   deploy/netns-cluster.sh rolling                  # restart n1 n2 n3 e1 e2 one after another
#
# Settings (environment): WRIT_NETNS_PREFIX (default "writ"; at most 9 characters: names of
# the namespaces, veths and bridge start with it), WRIT_NETNS_SUBNET (default "10.77.0": the
# /24 of the bridge, .1 in the root namespace), WRIT_NETNS_DIR (default .writ/netns: configs,
# PKI, data, logs, the env file), WRIT_BIN (default the debug build). Only namespaces, links
# and routes this script created are touched; `down` removes all of them.
set -euo pipefail

P="${WRIT_NETNS_PREFIX:-writ}"
SUB="${WRIT_NETNS_SUBNET:-10.77.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${WRIT_NETNS_DIR:-$ROOT/.writ/netns}"
WRIT="${WRIT_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/writ}"
HOSTS="n1 n2 n3 e1 e2 x1"
BRIDGE="${P}br"

die() { echo "netns-cluster: $*" >&2; exit 1; }
[ "${#P}" -le 9 ] || die "WRIT_NETNS_PREFIX must be at most 9 characters"

addr() { # host -> IPv4 address
  case "$1" in
    n?) echo "$SUB.1${1#n}" ;;
    e?) echo "$SUB.2${1#e}" ;;
    x?) echo "$SUB.3${1#x}" ;;
    *) die "unknown host $1" ;;
  esac
}
ns() { echo "$P-$1"; }
in_ns() { local h="$1"; shift; ip netns exec "$(ns "$h")" "$@"; }

# Waits (bounded) until a command succeeds.
await() {
  local what="$1" tries="$2"; shift 2
  for _ in $(seq "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "timed out waiting for $what"
}

admin() { "$WRIT" admin --url "https://$(addr n1):7443" --token "$(cat "$DIR/operator-token")" --ca "$DIR/pki/ca.pem" "$@"; }

network_up() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUB.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for h in $HOSTS; do
    ip netns add "$(ns "$h")"
    ip link add "$P-$h" type veth peer name eth0 netns "$(ns "$h")"
    ip link set "$P-$h" master "$BRIDGE" up
    ip -n "$(ns "$h")" addr add "$(addr "$h")/24" dev eth0
    ip -n "$(ns "$h")" link set eth0 up
    ip -n "$(ns "$h")" link set lo up
    ip -n "$(ns "$h")" route add default via "$SUB.1"
  done
}

pki_up() {
  "$WRIT" pki init --dir "$DIR/pki" >/dev/null
  for i in 1 2 3; do "$WRIT" pki issue node "$i" --dir "$DIR/pki" --host "$(addr "n$i")" >/dev/null; done
  for i in 1 2; do "$WRIT" pki issue edge "e$i" --dir "$DIR/pki" --host "$(addr "e$i")" >/dev/null; done
  (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/operator-token")
}

start() { # host, log file, command... (the pid file holds the process itself: ip execs it)
  local h="$1" log="$2"; shift 2
  ip netns exec "$(ns "$h")" setsid "$@" >"$log" 2>&1 < /dev/null &
  echo $! > "$DIR/$h.pid"
}

nodes_up() {
  local members=""
  for i in 1 2 3; do members+=$'[[members]]\n'"id = $i"$'\n'"addr = \"https://$(addr "n$i"):7001\""$'\n'; done
  for i in 1 2 3; do
    mkdir -p "$DIR/n$i"
    cat > "$DIR/n$i/node.toml" <<EOF
node_id = $i
listen = "$(addr "n$i"):7001"
admin_listen = "$(addr "n$i"):7443"
probe_listen = "$(addr "n$i"):9100"
data_dir = "$DIR/n$i/data"
operator_token_file = "$DIR/operator-token"
bootstrap = true
$members
[raft]
heartbeat_ms = 100
election_min_ms = 800
election_max_ms = 1600
[tls]
cert = "$DIR/pki/node-$i.pem"
key = "$DIR/pki/node-$i-key.pem"
ca = "$DIR/pki/ca.pem"
EOF
    start "n$i" "$DIR/n$i/node.log" "$WRIT" node --config "$DIR/n$i/node.toml"
  done
  for i in 1 2 3; do await "node $i probes" 120 curl -sf "http://$(addr "n$i"):9100/readyz"; done
}

edges_up() {
  local ledger="\"https://$(addr n1):7001\", \"https://$(addr n2):7001\", \"https://$(addr n3):7001\""
  for i in 1 2; do
    mkdir -p "$DIR/e$i"
    cat > "$DIR/e$i/edge.toml" <<EOF
listen = "$(addr "e$i"):8443"
probe_listen = "$(addr "e$i"):9101"
canonical_url = "https://$(addr "e$i"):8443/mcp"
ledger = [$ledger]
admin = ["https://$(addr n1):7443", "https://$(addr n2):7443", "https://$(addr n3):7443"]
seal_key_file = "$DIR/seal-key"
[tls]
cert = "$DIR/pki/edge-e$i.pem"
key = "$DIR/pki/edge-e$i-key.pem"
[ledger_tls]
cert = "$DIR/pki/edge-e$i.pem"
key = "$DIR/pki/edge-e$i-key.pem"
ca = "$DIR/pki/ca.pem"
[executor]
listen = "$(addr "e$i"):9444"
url = "https://$(addr "e$i"):9444"
EOF
  done
  # The first edge creates the shared seal key; then the second starts.
  for i in 1 2; do
    start "e$i" "$DIR/e$i/edge.log" env WRIT_ALLOCATOR=mimalloc "$WRIT" edge --config "$DIR/e$i/edge.toml"
    await "edge $i probes" 120 curl -sf "http://$(addr "e$i"):9101/readyz"
  done
}

executor_up() {
  admin tenant create netns-site >/dev/null
  admin site create --tenant netns-site site-x1 >/dev/null
  admin device create --tenant netns-site --site site-x1 press-x1 --class press.v1 >/dev/null
  local token
  token="$(admin executor enroll-token --tenant netns-site --site site-x1 --device press-x1 -o json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')"
  mkdir -p "$DIR/x1"
  in_ns x1 "$WRIT" executor enroll --edge "https://$(addr e1):8443/mcp" --ca "$DIR/pki/ca.pem" \
    --token "$token" --out "$DIR/x1/enrolled" >/dev/null
  start x1 "$DIR/x1/executor.log" "$WRIT" executor run --config "$DIR/x1/enrolled/executor.toml"
}

write_env() {
  local admins="" mcps="" peers="" pids=""
  for i in 1 2 3; do admins+="https://$(addr "n$i"):7443 "; peers+="https://$(addr "n$i"):7001 "; done
  for i in 1 2; do mcps+="https://$(addr "e$i"):8443/mcp "; done
  for h in $HOSTS; do pids+="$(cat "$DIR/$h.pid") "; done
  (umask 077; cat > "$DIR/env" <<EOF
export WRIT_NETNS_PREFIX="$P"
export WRIT_NETNS_SUBNET="$SUB"
export WRIT_ADMIN_URL="https://$(addr n1):7443"
export WRIT_NODE_URLS="${admins% }"
export WRIT_PEER_URLS="${peers% }"
export WRIT_MCP_URLS="${mcps% }"
export WRIT_MCP_URL="https://$(addr e1):8443/mcp"
export WRIT_EXECUTOR_URLS="https://$(addr e1):9444 https://$(addr e2):9444"
export WRIT_ADMIN_TOKEN="$(cat "$DIR/operator-token")"
export WRIT_CA_FILE="$DIR/pki/ca.pem"
export WRIT_NETNS_PIDS="${pids% }"
EOF
  )
}

up() {
  [ -x "$WRIT" ] || die "$WRIT is missing (make build)"
  [ "$(id -u)" = 0 ] || die "needs root (ip netns)"
  ip netns list | grep -q "^$P-n1\b" && die "$P is up already (down first)"
  rm -rf "$DIR" && mkdir -p "$DIR"
  network_up
  pki_up
  nodes_up
  edges_up
  executor_up
  write_env
  echo "netns cluster $P up: admin https://$(addr n1):7443, MCP https://$(addr e1):8443/mcp and https://$(addr e2):8443/mcp"
  echo "env: source $DIR/env"
}

down() {
  for h in $HOSTS; do
    [ -f "$DIR/$h.pid" ] && kill -TERM "$(cat "$DIR/$h.pid")" 2>/dev/null || true
  done
  for h in $HOSTS; do
    [ -f "$DIR/$h.pid" ] || continue
    pid="$(cat "$DIR/$h.pid")"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$DIR/$h.pid"
  done
  for h in $HOSTS; do
    ip netns pids "$(ns "$h")" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$(ns "$h")" 2>/dev/null || true
    ip link del "$P-$h" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  echo "netns cluster $P down"
}

status() {
  for h in $HOSTS; do
    local state="stopped"
    [ -f "$DIR/$h.pid" ] && kill -0 "$(cat "$DIR/$h.pid")" 2>/dev/null && state="running (pid $(cat "$DIR/$h.pid"))"
    local ready=""
    case "$h" in
      n?) ready="$(curl -s -m 2 "http://$(addr "$h"):9100/readyz" || echo unreachable)" ;;
      e?) ready="$(curl -s -m 2 "http://$(addr "$h"):9101/readyz" || echo unreachable)" ;;
    esac
    printf '%-3s %-15s %-22s %s\n' "$h" "$(addr "$h")" "$state" "${ready%$'\n'}"
  done
}

# The command line of a host's process.
command_of() {
  case "$1" in
    n?) echo "$WRIT node --config $DIR/$1/node.toml" ;;
    e?) echo "env WRIT_ALLOCATOR=mimalloc $WRIT edge --config $DIR/$1/edge.toml" ;;
    *) die "restart nodes and edges only" ;;
  esac
}

probe_of() {
  case "$1" in
    n?) echo "http://$(addr "$1"):9100/readyz" ;;
    e?) echo "http://$(addr "$1"):9101/readyz" ;;
  esac
}

# An orderly restart: SIGTERM (a leader hands over, listeners drain), wait for the exit, start
# again with the same configuration and data, and wait until it is ready — for a node that means
# caught up with the cluster's commits (its /readyz): restarting the next node before that would
# leave a majority that cannot acknowledge new entries (the one still catching up), and writes
# would stall.
restart() {
  local h="$1" pid log
  pid="$(cat "$DIR/$h.pid")"
  kill -TERM "$pid"
  for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -0 "$pid" 2>/dev/null && die "$h did not stop within 30 s of SIGTERM"
  case "$h" in n?) log="$DIR/$h/node.log" ;; *) log="$DIR/$h/edge.log" ;; esac
  # shellcheck disable=SC2046
  start "$h" "$log.restarted" $(command_of "$h")
  await "$h ready (and caught up) after its restart" 240 curl -sf "$(probe_of "$h")"
  kill -0 "$(cat "$DIR/$h.pid")" 2>/dev/null || die "$h exited after its restart: $(tail -3 "$log.restarted")"
  echo "restarted $h"
}

rolling() {
  for h in n1 n2 n3 e1 e2; do restart "$h"; done
}

# host A drops everything it would send to host B's address.
cut() { in_ns "$1" ip route replace blackhole "$(addr "$2")/32"; }

leader() {
  admin cluster status -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])'
}

partition() {
  case "${1:-}" in
    leader)
      local l; l="$(leader)"
      [ -n "$l" ] && [ "$l" != None ] || die "no leader to isolate"
      for h in $HOSTS; do
        [ "$h" = "n$l" ] && continue
        cut "n$l" "$h"; cut "$h" "n$l"
      done
      echo "isolated n$l (the leader)" ;;
    edge)
      local e="e${2:?edge number}"
      for i in 1 2 3; do cut "$e" "n$i"; cut "n$i" "$e"; done
      echo "cut $e from every node" ;;
    asym)
      cut "${2:?host A}" "${3:?host B}"
      echo "$2 can no longer send to $3" ;;
    *) die "partition leader | edge N | asym A B" ;;
  esac
}

heal() {
  for h in $HOSTS; do
    ip -n "$(ns "$h")" route show type blackhole 2>/dev/null | while read -r _ dst _; do
      ip -n "$(ns "$h")" route del blackhole "$dst"
    done
  done
  echo "healed"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  partition) shift; partition "$@" ;;
  heal) heal ;;
  restart) restart "${2:?host}" ;;
  rolling) rolling ;;
  *) die "usage: $0 up|down|status|partition …|heal" ;;
esac
