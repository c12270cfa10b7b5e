#!/usr/bin/env bash
# scripts/gpu-check.sh — the NCCL profiler plugin (patches/nccl/profiler) under real NCCL, on
# one NVIDIA GPU, with nothing but what the machine has installed (bash, a C compiler, python3,
# PyTorch with its NCCL ≥ 2.23); no network, no pip.
#
#   scripts/gpu-check.sh               build the plugin, run parts A and B, compare
#   scripts/gpu-check.sh --build-only  only build the plugin (with the machine's cc), exit 0
#   scripts/gpu-check.sh --keep        keep the work directory (logs, readings) and say where
#
# Exit: 0 every rank of both parts matched; 1 a mismatch, or a rank failed or hung;
#       2 refused: no usable GPU here (no nvidia-smi or /dev/nvidia*, PyTorch without CUDA,
#         NCCL older than 2.23, GPU in exclusive-process mode); 3 the plugin did not build.
#
# Two "nodes" on one GPU: both ranks use cuda:0, each with its own NCCL_HOSTID. NCCL hashes
# NCCL_HOSTID in place of hostname+boot_id (src/misc/utils.cc getHostHashOnce, 2.21-2.30.7),
# and everything intra-node keys on that hash: the same-GPU check in src/init.cc ("Duplicate
# GPU detected", hostHash && busId, 2.21-2.29.7; 2.30.7 "Multiple Ranks are using the same
# GPU", hostHash && UUID), the node count the plugin gets as nNodes (src/init.cc), P2P and SHM
# (src/transport/p2p.cc p2pCanConnect, src/transport/shm.cc shmCanConnect: no connection
# between different hostHashes; NCCL_P2P_DISABLE/NCCL_SHM_DISABLE below only make sure).
# So the ranks talk through NCCL's net transport (src/transport/net.cc), whose proxy events are
# what the plugin counts. NCCL_NET=Socket picks the built-in "Socket" net by name, compared
# case-insensitively (src/plugin/net.cc; 2.23: src/net.cc); NCCL_SOCKET_IFNAME=lo is honoured
# as given ("lo" is otherwise only the last resort, src/misc/socket.cc ncclFindInterfaces).
# NCCL_ALGO=Ring and NCCL_PROTO=Simple make the bytes on the wire the ring's payload,
# 2(N-1)/N x S per rank (see DEFAULT_TOL in scripts/gpu_check.py). NCCL_PROFILER_PLUGIN is a
# path to the library built here (src/plugin/profiler.cc, dlopen'ed as given).
#
# Part A: 2 ranks, torch.distributed (nccl), one warm-up element, then GPU_CHECK_ITERATIONS
#   all-reduces of GPU_CHECK_BYTES of fp32; each rank reads its progress file after every step
#   (scripts/gpu_check.py allreduce) — before destroy_process_group, since the plugin removes
#   the file when the last communicator is finalized.
# Part B: 2 ranks of `python3 -m mlcc.torch.job --backend nccl` (DDP with mlcc's comm hook; the
#   hook steps aside for the plugin's file but still reports its buckets and ring_sent), run
#   in-process by scripts/gpu_check.py ddp, which reads the plugin's file after every step.
# Both: the plugin's per-step bytes, its iteration counter and last_iteration_bytes against
#   2(N-1)/N x bytes (mlcc.ring.nccl_ring) and, in B, the hook's ring_sent.
#
#   In B, DDP rebuilds its buckets after step 1 (in gradient-ready order), so whether the
#   first-coll marker picked in step 1 recurs once per step is part of what is checked; the
#   table shows the layouts and the rule's prediction. GPU_CHECK_MODEL_BYTES=1000000 (all
#   parameters in one bucket, which the rebuild cannot change) separates counting from marking.
#
# Knobs: GPU_CHECK_ITERATIONS (10), GPU_CHECK_BYTES (67108864: 64 MiB), GPU_CHECK_MODEL_BYTES
# (20MB), GPU_CHECK_TIMEOUT (180 s per rank and part), GPU_CHECK_TOL (0.001), CC (cc),
# NCCL_DEBUG (INFO; NCCL's log goes to the work directory).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build_only=0 keep=0
for arg in "$@"; do
  case $arg in
    --build-only) build_only=1 ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $arg (try --help)" >&2; exit 64 ;;
  esac
done

iterations=${GPU_CHECK_ITERATIONS:-10}
nbytes=${GPU_CHECK_BYTES:-67108864}
model_bytes=${GPU_CHECK_MODEL_BYTES:-20MB}
run_timeout=${GPU_CHECK_TIMEOUT:-180}
world=2

refuse() {
  echo "gpu-check: refused: $*" >&2
  echo "gpu-check: this check needs one NVIDIA GPU with PyTorch (CUDA) and its NCCL >= 2.23;" \
       "'scripts/gpu-check.sh --build-only' only builds the plugin" >&2
  exit 2
}

# ---- is there a GPU? (before anything that needs PyTorch: the refusal must work without it)
if [ "$build_only" = 0 ]; then
  gpu=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi -L 2>/dev/null | grep -m1 '^GPU ' || true)
  fi
  if [ -z "$gpu" ] && compgen -G "/dev/nvidia[0-9]*" >/dev/null; then
    gpu="$(compgen -G "/dev/nvidia[0-9]*" | head -1) (nvidia-smi: none or no GPU listed)"
  fi
  [ -n "$gpu" ] || refuse "no NVIDIA GPU here (no nvidia-smi listing a GPU, no /dev/nvidia[0-9]*)"
  command -v python3 >/dev/null 2>&1 || refuse "no python3"
  probe=$(python3 - 2>&1 <<'EOF' | tail -n 1
import sys
try:
    import torch
    import torch.distributed as dist
except Exception as e:
    print(f"PyTorch does not import: {e}"); sys.exit(1)
if not torch.cuda.is_available():
    print(f"PyTorch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(1)
if not dist.is_available() or not dist.is_nccl_available():
    print(f"PyTorch {torch.__version__} has no NCCL backend"); sys.exit(1)
v = torch.cuda.nccl.version()
v = v if isinstance(v, tuple) else (v // 10000, v % 10000 // 100, v % 100) if v >= 10000 \
    else (v // 1000, v % 1000 // 100, v % 100)
name = torch.cuda.get_device_name(0)
if v < (2, 23, 0):
    print(f"PyTorch {torch.__version__}'s NCCL is {'.'.join(map(str, v))}: the profiler plugin "
          "needs NCCL >= 2.23 (profiler API v1)")
    sys.exit(1)
print(f"PyTorch {torch.__version__}, NCCL {'.'.join(map(str, v))}, cuda:0 = {name}")
EOF
  ) || refuse "$probe"
  if command -v nvidia-smi >/dev/null 2>&1 && [ -z "${CUDA_VISIBLE_DEVICES:-}" ]; then
    mode=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader -i 0 2>/dev/null || true)
    case $mode in
      *Exclusive* | *Prohibited*)
        refuse "GPU 0 is in compute mode '$mode': two processes cannot share it (left as it is)" ;;
    esac
  fi
  echo "gpu-check: $gpu"
  echo "gpu-check: $probe"
fi

# ---- work directory, and cleaning up whatever this script started
work=$(mktemp -d "${TMPDIR:-/tmp}/mlcc-gpu-check.XXXXXX")
pids=()
cleanup() {
  local rc=$?
  for pid in ${pids[@]+"${pids[@]}"}; do
    kill -TERM "$pid" 2>/dev/null || true # `timeout`, which passes the signal to its rank
  done
  for pid in ${pids[@]+"${pids[@]}"}; do
    wait "$pid" 2>/dev/null || true
  done
  if [ "$keep" = 1 ]; then
    echo "gpu-check: work directory kept: $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- build the plugin with this machine's compiler, by its Makefile
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || { echo "gpu-check: no C compiler ($cc)" >&2; exit 3; }
plugin_dir=$work/plugin
mkdir -p "$plugin_dir"
echo "gpu-check: building the plugin with $($cc --version 2>/dev/null | head -1)"
if command -v make >/dev/null 2>&1; then
  make -s -C patches/nccl/profiler OUT="$plugin_dir" CC="$cc" >&2 ||
    { echo "gpu-check: the plugin did not build" >&2; exit 3; }
else
  # No make on this machine: patches/nccl/profiler/Makefile's one recipe, as it stands there.
  (cd patches/nccl/profiler &&
    "$cc" -std=gnu11 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror -I. \
      -I../../progress -o "$plugin_dir/libnccl-profiler-mlcc.so" mlcc_profiler.c -pthread) ||
    { echo "gpu-check: the plugin did not build" >&2; exit 3; }
fi
plugin=$plugin_dir/libnccl-profiler-mlcc.so
if command -v nm >/dev/null 2>&1; then
  syms=$(nm -D --defined-only "$plugin")
  for v in 1 2 3 4 5 6; do
    grep -qw "ncclProfiler_v$v" <<<"$syms" ||
      { echo "gpu-check: $plugin does not export ncclProfiler_v$v" >&2; exit 3; }
  done
fi
echo "gpu-check: built $plugin"
if [ "$build_only" = 1 ]; then
  exit 0
fi

# ---- the runs
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The environment of rank $1 of part $2 (a, b): its own NCCL_HOSTID, the socket transport, the
# plugin, and its progress files in $work/$2.shm.
rank_env() {
  local rank=$1 part=$2
  printf '%s\n' \
    "NCCL_HOSTID=mlcc-gpu-check-host$rank" \
    NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_ALGO=Ring NCCL_PROTO=Simple \
    NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 \
    NCCL_MNNVL_ENABLE=0 \
    "NCCL_PROFILER_PLUGIN=$plugin" \
    "NCCL_DEBUG=${NCCL_DEBUG:-INFO}" "NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,ENV,NET}" \
    "NCCL_DEBUG_FILE=$work/$part.rank$rank.nccl.log" \
    "MLCC_JOB_ID=gpu-check-$part" "MLCC_SHM_DIR=$work/$part.shm" MLCC_JOB_ARCH=allreduce \
    MLCC_NCCL_ITERATION=first-coll \
    "PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
}

# Starts every rank of part $1 (a, b) and waits for them; $2...: the command, @RANK@ replaced by
# the rank. Rank N's stdout goes to $work/$1.rankN.out, its stderr to .err, NCCL's log to
# .nccl.log.
run_part() {
  local part=$1
  shift
  mkdir -p "$work/$part.shm"
  local started=() rank envs
  for rank in $(seq 0 $((world - 1))); do
    local cmd=("${@//@RANK@/$rank}")
    mapfile -t envs < <(rank_env "$rank" "$part")
    env "${envs[@]}" timeout --kill-after=15 "$run_timeout" "${cmd[@]}" \
      >"$work/$part.rank$rank.out" 2>"$work/$part.rank$rank.err" &
    pids+=("$!")
    started+=("$!")
  done
  # Wait for all; once one rank fails, the others would only wait for it until their timeout:
  # stop them (by the pids started here).
  local ok=0 left=$world pid rc
  local -A finished=()
  while [ "$left" -gt 0 ]; do
    for rank in "${!started[@]}"; do
      pid=${started[$rank]}
      [ -z "${finished[$rank]:-}" ] && ! kill -0 "$pid" 2>/dev/null || continue
      rc=0
      wait "$pid" || rc=$?
      finished[$rank]=$rc
      left=$((left - 1))
      if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        echo "gpu-check: part $part rank $rank did not finish within ${run_timeout}s (killed)" >&2
      elif [ "$rc" != 0 ]; then
        echo "gpu-check: part $part rank $rank exited $rc" >&2
      fi
      if [ "$rc" != 0 ] && [ "$ok" = 0 ]; then
        ok=1
        for p in "${started[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
      fi
    done
    [ "$left" -gt 0 ] && sleep 0.5
  done
  pids=()
  for rank in $(seq 0 $((world - 1))); do
    local log=$work/$part.rank$rank.nccl.log err=$work/$part.rank$rank.err
    # What NCCL says about the setup (wording varies by version): the plugin, the socket
    # transport on lo, two nodes.
    grep -ihE 'NCCL version|PROFILER/Plugin|NET/Socket : Using|nNodes [0-9]|NCCL WARN' "$log" 2>/dev/null |
      grep -v 'Could not find' | sed "s/^/  [$part rank $rank] /" | head -10 || true
    if [ "$ok" != 0 ]; then
      echo "  [$part rank $rank] last lines of its stderr ($err):"
      tail -20 "$err" 2>/dev/null | sed 's/^/    /' || true
    fi
  done
  return "$ok"
}

fail=0

echo
echo "== Part A: $world ranks on cuda:0, all_reduce of $nbytes B x $iterations over NCCL's socket transport"
port=$(free_port)
run_part a python3 scripts/gpu_check.py allreduce --rank @RANK@ --world "$world" \
  --master "127.0.0.1:$port" --bytes "$nbytes" --iterations "$iterations" \
  --timeout "$run_timeout" --out "$work/a.rank@RANK@.json" || fail=1
readings=() reports=()
for r in $(seq 0 $((world - 1))); do readings+=("$work/a.rank$r.json"); done
PYTHONPATH=$root/python python3 scripts/gpu_check.py compare allreduce "${readings[@]}" || fail=1

echo
echo "== Part B: $world ranks of mlcc.torch.job (DDP, comm hook) on cuda:0, $model_bytes of parameters x $iterations"
port=$(free_port)
run_part b python3 scripts/gpu_check.py ddp --out "$work/b.rank@RANK@.json" -- \
  --rank @RANK@ --world "$world" --master "127.0.0.1:$port" --backend nccl \
  --iterations "$iterations" --model-bytes "$model_bytes" --sample-ms 0 \
  --timeout "$run_timeout" || fail=1
readings=() reports=()
for r in $(seq 0 $((world - 1))); do
  readings+=("$work/b.rank$r.json") reports+=("$work/b.rank$r.out")
done
PYTHONPATH=$root/python python3 scripts/gpu_check.py compare ddp "${readings[@]}" \
  --reports "${reports[@]}" || fail=1

echo
if [ "$fail" = 0 ]; then
  echo "gpu-check: passed (plugin, hook and NCCL's ring agree on every rank)"
else
  echo "gpu-check: FAILED (see above; --keep keeps the logs)"
fi
exit "$fail"
