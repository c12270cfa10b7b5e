#!/usr/bin/env bash
# Sets up the machine and runs every check CI runs: formatting, clippy (which also type-checks
# the benches), the whole test suite, the Debian packages installed into a fresh root.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== deploy/ (systemd units, Kubernetes manifests)"
scripts/validate-deploy.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# Snapshot tests must fail on drift in CI rather than write new snapshots.
export INSTA_UPDATE=no
# Build everything first and flush the build's dirty pages: the timing-sensitive root tests
# (BPF pacing accuracy) must not share the CPU with the kernel writing back gigabytes of target/.
cargo test --workspace --locked --no-run
sync
cargo test --workspace --locked
echo "== Debian packages, installed into a fresh Debian root (scripts/test-packages.sh)"
scripts/test-packages.sh
echo "== the operator's guide, run in a systemd container (scripts/test-guide.sh)"
scripts/test-guide.sh
echo "== fuzz targets, bounded (scripts/fuzz.sh; FUZZ_SECONDS per target, default 30)"
scripts/fuzz.sh
echo "== Alg. 1 against the exact optimum (core/tests/cases/optimality.rs)"
cat target/tmp/optimality-report.txt 2>/dev/null || echo "(no optimality report)"
