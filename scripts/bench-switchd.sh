#!/usr/bin/env bash
# Benchmarks mlcc-switchd at paper scale: 1000 hosts x 6 flows per 60 ms slot against one switch.
# Builds release, starts the server pinned to core 0 (one worker thread), runs the load generator
# pinned to core 1, prints the generator's JSON on stdout and stops the server.
# Usage: scripts/bench-switchd.sh [extra `mlcc-switchd bench` flags, e.g. --burst --slots 100]
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-1000}
FLOWS=${FLOWS:-6}
SLOTS=${SLOTS:-100}
PORT=${PORT:-50161}
METRICS_PORT=${METRICS_PORT:-50162}

cargo build --release -q -p mlcc-switch-emu
bin=target/release/mlcc-switchd
work=$(mktemp -d)
topo=$work/topology.toml
cat >"$topo" <<TOML
[generate]
kind = "single-switch"
hosts = $HOSTS
host_link = "25Gbit"
TOML

taskset -c 0 "$bin" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$METRICS_PORT" \
  --topology "$topo" --switch sw1 --tau 60ms --horizon 10 --worker-threads 1 \
  >"$work/server.log" 2>&1 &
server=$!
cleanup() { kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

for _ in $(seq 100); do
  grep -q "serving mlcc.v1.Switch" "$work/server.log" && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done

taskset -c 1 "$bin" bench --target "127.0.0.1:$PORT" --hosts "$HOSTS" --flows "$FLOWS" \
  --slots "$SLOTS" "$@"

# Server-side view: time spent inside the handlers (decode-to-reply excluded from the wire).
curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null \
  | grep -E '^mlcc_switch_rpc_duration_seconds_(sum|count)' >&2 || true
