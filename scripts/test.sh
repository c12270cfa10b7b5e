#!/usr/bin/env bash
# Sets up the machine and runs every check CI runs: formatting, clippy (which also type-checks
# the benches), the whole test suite, the Debian packages installed into a fresh root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# One build from scratch gains nothing from incremental state, which is gigabytes of target/.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Each phase's heading says when it began and how far into the run, so a slow CI shows where.
phase() { echo "== $* [$(date +%T), ${SECONDS}s in]"; }
phase "disk free where target/ is built"
df -h . | tail -1

phase "deploy/ (systemd units, Kubernetes manifests)"
scripts/validate-deploy.sh
phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
phase "cargo test"
# Snapshot tests must fail on drift in CI rather than write new snapshots.
export INSTA_UPDATE=no
# Build everything first and flush the build's dirty pages: the timing-sensitive root tests
# (BPF pacing accuracy) must not share the CPU with the kernel writing back gigabytes of target/.
cargo test --workspace --locked --no-run
sync
cargo test --workspace --locked
phase "python/ (mlcc.progress against the C header, mlcc.ring, DDP jobs over Gloo)"
/usr/bin/python3 -m unittest discover -s python/tests -v
phase "python/ installs with pip from the checkout"
venv=$(mktemp -d)
/usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet --no-build-isolation --no-index ./python
(cd "$venv" && "$venv/bin/python" -c 'import mlcc.torch, mlcc.progress; print("mlcc", mlcc.__version__, "from", mlcc.__file__)')
rm -rf "$venv"
phase "scripts/gpu-check.sh: builds the NCCL profiler plugin here, refuses without a GPU"
scripts/gpu-check.sh --build-only
if compgen -G "/dev/nvidia[0-9]*" >/dev/null; then
  scripts/gpu-check.sh
else
  rc=0; scripts/gpu-check.sh >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { echo "gpu-check.sh without a GPU exited $rc, expected 2" >&2; exit 1; }
fi
phase "Debian packages, installed into a fresh Debian root (scripts/test-packages.sh)"
# The debug binaries `cargo test --workspace` built above, not the operators' default dist (or
# release): the packaging, the install and the guide below are the same for every profile, and
# an optimized build costs 7 minutes of a 2-core CI machine (a `cargo build` of the debug ones,
# 2 minutes: it resolves some crates' features otherwise than `cargo test`).
scripts/test-packages.sh --profile dev --no-build
phase "the operator's guide, run in a systemd container (scripts/test-guide.sh)"
scripts/test-guide.sh
phase "fuzz targets, bounded (scripts/fuzz.sh; FUZZ_SECONDS per target, default 30)"
scripts/fuzz.sh
phase "Alg. 1 against the exact optimum (core/tests/cases/optimality.rs)"
cat target/tmp/optimality-report.txt 2>/dev/null || echo "(no optimality report)"
phase "target/ after the run"
du -sh target 2>/dev/null || true
phase "done"
