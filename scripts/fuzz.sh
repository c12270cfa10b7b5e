#!/usr/bin/env bash
# Runs every fuzz target (the bolero harnesses in {core,switch-emu,scheduler}/tests/fuzz.rs) for a
# bounded time on stable Rust: each replays its kept corpus (tests/__fuzz__/<target>/) and then
# tries random inputs for FUZZ_SECONDS. The targets of a crate run in parallel, one per test
# thread, so the wall time is about FUZZ_SECONDS x targets / cores: with the default 30 s, 16
# targets on 2 cores, about 4 minutes. Debug builds on purpose: overflow checks turn silent
# wrap-arounds into findings.
# Usage: FUZZ_SECONDS=60 scripts/fuzz.sh [extra cargo test args, e.g. -- session_frames]
# A failure prints the input and BOLERO_RANDOM_SEED=...; re-run one target with that variable set
# to replay it, then add a regression test (or a file in the target's crashes/ directory).
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-30}
export BOLERO_RANDOM_TEST_TIME_MS=$((FUZZ_SECONDS * 1000))
for crate in mlcc-core mlcc-switch-emu mlcc-scheduler; do
  echo "== fuzz $crate (${FUZZ_SECONDS}s per target)"
  cargo test --locked -q -p "$crate" --test fuzz "$@" -- --nocapture 2>&1 \
    | grep -E "run time|valid|added|^test result|FAILED|panicked|Input|Error|BOLERO_RANDOM_SEED" || true
  # grep above only filters the report; the exit status is cargo's.
  test "${PIPESTATUS[0]}" -eq 0
done
