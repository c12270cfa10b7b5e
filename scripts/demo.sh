#!/usr/bin/env bash
# Sets up the machine and runs the main demo: a small planning run of two co-located jobs
# through the very code mlccd, mlcc-switchd and mlcc-sim use, printing per-slot rates.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo run --release --locked -p mlcc-core --example plan -- "$@"
