#!/usr/bin/env bash
# Validates deploy/ with the standard tools (run by scripts/test.sh; setup.sh installs them):
#  - the systemd units with `systemd-analyze verify`, failing on any diagnostic it prints
#    (it exits 0 on unknown keys and unparsable values, which are exactly the mistakes to catch);
#  - every Kubernetes manifest under deploy/k8s with `kubernetes-validate --strict` (the
#    official OpenAPI schemas; --strict also rejects unknown fields, e.g. a misspelt key).
# The TOML example configs and the Grafana dashboard are checked by Rust tests
# (scheduler/tests/cases/deploy.rs), which parse them with the daemons' own loaders.
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0

echo "== systemd-analyze verify deploy/*.service"
# The units start /usr/local/bin/mlccd and /usr/local/bin/mlcc-switchd, which CI has not
# installed, and verify refuses a unit whose ExecStart is not executable. So each unit is
# verified as a copy whose /usr/local/bin/ is a temporary directory holding stub executables;
# every other line is verified as written. (`--root` would need a whole systemd tree.)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
for b in mlccd mlccctl mlcc-switchd; do
  printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/$b"
  chmod +x "$tmp/bin/$b"
done
for unit in deploy/*.service; do
  copy="$tmp/$(basename "$unit")"
  sed "s#/usr/local/bin/#$tmp/bin/#g" "$unit" >"$copy"
  if ! out=$(systemd-analyze verify "$copy" 2>&1) || [ -n "$out" ]; then
    echo "FAIL $unit:"
    printf '%s\n' "${out//$tmp\/bin\//\/usr\/local\/bin\/}" | sed 's/^/    /'
    fail=1
  else
    echo "ok   $unit"
  fi
done

echo "== kubernetes-validate --strict deploy/k8s/*.yaml"
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "FAIL kubernetes-validate not found (scripts/setup.sh installs it from PyPI)"
  fail=1
elif ! kubernetes-validate --strict --quiet deploy/k8s/*.yaml; then
  echo "FAIL deploy/k8s: see above"
  fail=1
else
  echo "ok   deploy/k8s/*.yaml"
fi

if [ "$fail" -ne 0 ]; then
  echo "validate-deploy: FAILED" >&2
  exit 1
fi
echo "validate-deploy: all deploy files valid"
