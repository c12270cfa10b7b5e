#!/usr/bin/env bash
# Benchmarks mlcc-switchd at paper scale: 1000 hosts x 6 flows per 60 ms slot against one switch.
# Builds release, starts the server pinned to core 0 (--worker-threads 1: a current-thread
# runtime), runs the load generator pinned to core 1 (GEN_CPUS), prints the generator's JSON on
# stdout (with the CPU both sides used) and stops the server. The machine's load goes to stderr:
# figures taken while other work runs on these cores are noisy.
# Usage: scripts/bench-switchd.sh [extra `mlcc-switchd bench` flags, e.g. --mode unary --burst]
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-1000}
FLOWS=${FLOWS:-6}
SLOTS=${SLOTS:-100}
PORT=${PORT:-50161}
METRICS_PORT=${METRICS_PORT:-50162}
SERVER_CPU=${SERVER_CPU:-0}
GEN_CPUS=${GEN_CPUS:-1}
# Scheduling priority of both sides, e.g. NICE=-10 so that other work on the same cores (builds,
# simulations) cannot take half of a core away mid-run. Needs root for negative values.
NICE=${NICE:-0}
# RT=1 runs both sides SCHED_FIFO (chrt -f 10): on a shared machine a compile on the server's
# core otherwise delays its wake-ups by milliseconds, which shows up as p99, not as CPU use.
# The kernel's RT throttling still leaves 5% of each core to everything else.
RT=${RT:-0}
prio=(nice -n "$NICE")
if [ "$RT" = 1 ]; then prio=(chrt -f 10); fi

cargo build --release -q -p mlcc-switch-emu
bin=target/release/mlcc-switchd
# SERVER_BIN=/path/to/another/mlcc-switchd serves with that build (the generator stays this
# one), for A/B comparisons of the server in one sitting: run-to-run drift of the machine is
# larger than most per-message savings.
server_bin=${SERVER_BIN:-$bin}
work=$(mktemp -d)
topo=$work/topology.toml
cat >"$topo" <<TOML
[generate]
kind = "single-switch"
hosts = $HOSTS
host_link = "25Gbit"
TOML

"${prio[@]}" taskset -c "$SERVER_CPU" "$server_bin" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$METRICS_PORT" \
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

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${prio[@]}" taskset -c "$GEN_CPUS" "$bin" bench --target "127.0.0.1:$PORT" --hosts "$HOSTS" --flows "$FLOWS" \
  --slots "$SLOTS" --server-pid "$server" "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# Server-side view: time spent inside the handlers (decode-to-reply excluded from the wire).
curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null \
  | grep -E '^mlcc_switch_rpc_duration_seconds_(sum|count)' >&2 || true
