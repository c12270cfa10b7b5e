#!/usr/bin/env bash
# mlccd's CPU with N active flows (issue 5: goal < 2 % of one core with 32 flows over 60 s).
#
# Two mlccd (h0, h1) and one mlcc-switchd in the caller's network namespace on loopback
# addresses 127.0.<net>.x, the real BPF datapath under a CC name and pin dir of its own, and
# N two-worker ring jobs (mlcc-trainer, progress files on) between h0 and h1: each host sends
# N flow groups. Prints one JSON line with h0's mlccd CPU (utime + stime from /proc/<pid>/stat)
# over the measured window. Needs root and the binaries in $BIN (mlccd, mlcc-switchd,
# mlcc-trainer, mlcc-bpf); PERF=<file> also records a perf profile of it, and HOOK=<command> runs
# after the warm-up with h0's mlccd pid in $D0 (e.g. `timeout 10 strace -c -p $D0`). Everything it
# creates is removed on exit.
#
#   BIN=/tmp/bins FLOWS=32 SECS=60 scheduler/benches/daemon-cpu.sh
set -euo pipefail
BIN=${BIN:?directory holding mlccd mlcc-switchd mlcc-trainer mlcc-bpf}
FLOWS=${FLOWS:-32}
SECS=${SECS:-60}
WARMUP=${WARMUP:-8}
NET=${NET:-$((100 + $$ % 100))}
TAG=dcpu$$
DIR=$(mktemp -d /tmp/mlcc-$TAG.XXXX)
PIN=/sys/fs/bpf/mlcc-$TAG
CC=mlcc_$TAG
H0=127.0.$NET.1 H1=127.0.$NET.2 SW=127.0.$NET.3
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "$BIN/mlcc-bpf" --pin-dir "$PIN" unload >/dev/null 2>&1 || true
  rm -rf "$DIR" "$PIN"
}
trap cleanup EXIT
mkdir -p "$DIR/shm/h0" "$DIR/shm/h1"
cat >"$DIR/topo.toml" <<T
[[switch]]
name = "tor"
tier = 0
emulator = "$SW:7470"
[[host]]
name = "h0"
ip = "$H0"
rack = "tor"
[[host]]
name = "h1"
ip = "$H1"
rack = "tor"
[[link]]
a = "h0"
b = "tor"
capacity = "400Mbit"
[[link]]
a = "h1"
b = "tor"
capacity = "400Mbit"
T
"$BIN/mlcc-bpf" --pin-dir "$PIN" load --name "$CC" --rtt-floor-us 8000 >/dev/null
"$BIN/mlcc-switchd" --topology "$DIR/topo.toml" --switch tor --listen "$SW:7470" \
  --metrics-listen "$SW:0" >"$DIR/switchd.log" 2>&1 &
PIDS+=($!)
for h in h0 h1; do
  ip=$([ $h = h0 ] && echo $H0 || echo $H1)
  "$BIN/mlccd" --host $h --topology "$DIR/topo.toml" --shm-dir "$DIR/shm/$h" \
    --admin-socket "$DIR/$h.sock" --peer-listen "$ip:7471" --metrics-listen "$ip:0" \
    --datapath bpf --bpf-pin-dir "$PIN" >"$DIR/mlccd-$h.log" 2>&1 &
  PIDS+=($!)
  [ $h = h0 ] && D0=$!
done
sleep 1
for j in $(seq 1 "$FLOWS"); do
  for r in 0 1; do
    me=$([ $r = 0 ] && echo $H0 || echo $H1); other=$([ $r = 0 ] && echo $H1 || echo $H0)
    MLCC_JOB_ID=job$j MLCC_JOB_ARCH=allreduce MLCC_MODEL_BYTES=50000000 MLCC_WORLD_SIZE=2 \
      MLCC_SHM_DIR="$DIR/shm/h$r" MLCC_CC=$CC \
      "$BIN/mlcc-trainer" --job job$j --kind ring --rank $r --listen "$me:$((20000 + j))" \
      --world 2 --next "$other:$((20000 + j))" --model-bytes 50MB --iterations 100000 \
      >"$DIR/trainer-$j-$r.log" 2>&1 &
    PIDS+=($!)
  done
done
sleep "$WARMUP"; [ -n "${HOOK:-}" ] && eval "$HOOK"
cpu() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' /proc/"$1"/stat; }
kill -0 "$D0" || { cat "$DIR/mlccd-h0.log"; exit 1; }
c0=$(cpu "$D0"); t0=$(date +%s.%N)
if [ -n "${PERF:-}" ]; then perf record -q -F ${PERF_FREQ:-499} ${PERF_ARGS:--g} -p "$D0" -o "$PERF" -- sleep "$SECS" 2>/dev/null
else sleep "$SECS"; fi
c1=$(cpu "$D0"); t1=$(date +%s.%N)
kill -0 "$D0" || { cat "$DIR/mlccd-h0.log"; exit 1; }
flows=$("$BIN/mlccctl" --socket "$DIR/h0.sock" --json flows 2>/dev/null | grep -o '"planned_rate_bytes_per_sec"' | wc -l || true)
load=$(cut -d' ' -f1 /proc/loadavg)
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v f="$FLOWS" -v seen="$flows" -v l="$load" \
  'BEGIN { printf "{\"flows\":%d,\"flows_seen\":%d,\"secs\":%.1f,\"cpu_secs\":%.2f,\"cpu_percent_of_one_core\":%.2f,\"loadavg\":%s}\n", f, seen, t1 - t0, (c1 - c0) / 100, (c1 - c0) / (t1 - t0), l }'
