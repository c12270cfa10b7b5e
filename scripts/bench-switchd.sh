#!/usr/bin/env bash
# Benchmarks mlcc-switchd at paper scale: 1000 hosts x 6 flows per 60 ms slot against one switch.
# Builds the dist profile (PROFILE), starts the server pinned to core 0 (--worker-threads 1: a
# current-thread runtime), runs the load generator pinned to core 1 (GEN_CPUS) and stops the
# server; then does the same against `mlcc-switchd bench-baseline` (the same gRPC service
# answering every message empty, no table), so the switch's CPU per flow-update is reported as
# a ratio to the transport's own, measured in the same sitting. Prints one JSON object on stdout:
# {"switch": <bench report>, "baseline": <bench report>, "ratio": ..., "verdict": ...}.
# The machine's load goes to stderr: figures taken while other work runs on these cores are noisy.
#
# Exits 1 when the switch left any offered flow-update unapplied (refused, shed, timed out) and
# says on stderr whether the generator (a full core) or the switch was the limit.
# BASELINE=0 skips the baseline run.
# Usage: scripts/bench-switchd.sh [extra `mlcc-switchd bench` flags, e.g. --mode unary --burst,
#        --links 16 --ranks same for a core switch's busy downlinks]
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

BASELINE=${BASELINE:-1}

# PROFILE=release (or dev) benches that build; the default is the one the packages ship.
PROFILE=${PROFILE:-dist}
cargo build --profile "$PROFILE" -q -p mlcc-switch-emu
profdir=$PROFILE
[ "$PROFILE" = dev ] && profdir=debug
bin=${CARGO_TARGET_DIR:-target}/$profdir/mlcc-switchd
# SERVER_BIN=/path/to/another/mlcc-switchd serves with that build (the generator stays this
# one), for A/B comparisons of the server in one sitting: run-to-run drift of the machine is
# larger than most per-message savings.
server_bin=${SERVER_BIN:-$bin}
# GEN_BIN=/path/to/another/mlcc-switchd generates the load with that build, for A/B comparisons
# of the generator (the servers stay this build, or SERVER_BIN's).
gen_bin=${GEN_BIN:-$bin}


# run_one SUBCOMMAND... : serves with the given server command line, benches it, prints the
# generator's JSON into $work/$label.json.
run_one() {
  local label=$1
  shift
  "${prio[@]}" taskset -c "$SERVER_CPU" "$@" --listen "127.0.0.1:$PORT" \
    --topology "$topo" --switch sw1 --tau 60ms --horizon 10 --worker-threads 1 \
    >"$work/$label.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    grep -q "serving mlcc.v1.Switch" "$work/$label.log" && break
    kill -0 "$server" 2>/dev/null || { cat "$work/$label.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "$label: load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "${prio[@]}" taskset -c "$GEN_CPUS" "$gen_bin" bench --target "127.0.0.1:$PORT" --hosts "$HOSTS" \
    --flows "$FLOWS" --slots "$SLOTS" --server-pid "$server" "${bench_args[@]}" >"$work/$label.json"
  echo "$label: load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  if [ "$label" = switch ]; then
    # Server-side view: time spent inside the handlers, messages shed past their deadline.
    curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" 2>/dev/null \
      | grep -E '^mlcc_switch_(rpc_duration_seconds_(sum|count)|session_expired)' >&2 || true
  fi
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=
}

work=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill -TERM "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
topo=$work/topology.toml
cat >"$topo" <<TOML
[generate]
kind = "single-switch"
hosts = $HOSTS
host_link = "25Gbit"
TOML
bench_args=("$@")

run_one switch "$server_bin" --metrics-listen "127.0.0.1:$METRICS_PORT"
if [ "$BASELINE" = 1 ]; then
  run_one baseline "$bin" bench-baseline
fi

python3 - "$work" "$BASELINE" <<'PY'
import json, os, sys
work, with_baseline = sys.argv[1], sys.argv[2] == "1"
out = {"switch": json.load(open(os.path.join(work, "switch.json")))}
def per_update(r):
    cpu, n = r["cpu"]["server"], r["accepted_items"]
    return cpu["cpu_secs"] / n * 1e6 if cpu and n else None
if with_baseline:
    out["baseline"] = json.load(open(os.path.join(work, "baseline.json")))
    s, b = per_update(out["switch"]), per_update(out["baseline"])
    out["ratio"] = {
        "note": "server CPU per applied flow-update, switch / transport baseline, same sitting",
        "switch_us_per_update": s and round(s, 2),
        "baseline_us_per_update": b and round(b, 2),
        "switch_over_baseline": round(s / b, 2) if s and b else None,
    }
r = out["switch"]
refused = r["refused"]["flow_updates"]
out["verdict"] = {
    "refused_flow_updates": refused,
    "limit": r["limit"],
    "ok": refused == 0,
}
print(json.dumps(out, indent=2))
if refused:
    who = {"generator": "the generator (a full core) was the limit, not the switch",
           "switch": "the switch was the limit"}.get(r["limit"], "")
    print(f"bench-switchd: {refused} offered flow-updates not applied "
          f"({r['refused']['fraction']:.2%}); {who}", file=sys.stderr)
    sys.exit(1)
if r["limit"] == "generator":
    print("bench-switchd: the generator used a full core: the offered load, not the switch, "
          "is the limit of this figure", file=sys.stderr)
PY
