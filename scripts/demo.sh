#!/usr/bin/env bash
# Sets up the machine and runs the main demo: the emulated cluster testbed (docs/design.md §14) —
# six hosts as network namespaces on one shaped switch, real training-like jobs over real TCP —
# running the paper-small scenario's short version once per congestion control (cubic, reno,
# bbr, mlcc with its switch emulator, per-host daemons and BPF datapath), then printing the
# job-completion-time table. Needs root. Results and plots: results/paper-small/.
# Arguments go to `mlcc-testbed run`, e.g. `--repeat 3`, or drop the short version with
# `scripts/demo.sh --full` (about 4x longer).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release --locked -p mlcc-testbed -p mlcc-scheduler -p mlcc-switch-emu
quick=(--quick)
args=()
for a in "$@"; do
  if [ "$a" = "--full" ]; then quick=(); else args+=("$a"); fi
done
./target/release/mlcc-testbed down >/dev/null
exec ./target/release/mlcc-testbed run --scenario paper-small --cc cubic,reno,bbr,mlcc "${quick[@]}" "${args[@]}"
