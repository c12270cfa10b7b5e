#!/usr/bin/env bash
# Installs everything mlcc needs to build, test and run its demo on a fresh Debian machine
# (run as root). Idempotent and quick when everything is already there; both README commands
# and CI call it, so a missing install step shows up in CI rather than on a user's machine.
set -euo pipefail

need_apt=()
# mlcc-bpf: clang+llvm compile the BPF programs, libelf+zlib link libbpf, bpftool dumps the
# kernel's vmlinux.h, iproute2 (ip, tc) builds the namespace testbed, iperf3 is its cross
# traffic. systemd provides systemd-analyze, which scripts/validate-deploy.sh runs on deploy/*.service.
# debootstrap makes the fresh Debian root scripts/test-packages.sh installs the packages into
# (build-essential's dpkg-dev builds them: dpkg-deb, dpkg-shlibdeps); systemd-container's
# systemd-nspawn boots that root with systemd for scripts/test-guide.sh.
# python3-torch (Debian's CPU build of PyTorch with Gloo) runs the testbed's torch-ddp jobs and
# python/tests.
want_pkgs=(build-essential pkg-config clang llvm libelf-dev zlib1g-dev bpftool iproute2 iperf3 libzmq3-dev python3-pip systemd systemd-container debootstrap python3-torch)
for p in "${want_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need_apt[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "setup: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# kubernetes-validate (PyPI): checks deploy/k8s against the Kubernetes OpenAPI schemas in
# scripts/validate-deploy.sh. Debian's pip refuses to install into the system Python without
# --break-system-packages (PEP 668); older pips do not know the flag, hence the fallback.
if ! command -v kubernetes-validate >/dev/null 2>&1; then
  echo "setup: installing kubernetes-validate (pip)"
  python3 -m pip install --quiet --break-system-packages kubernetes-validate 2>/dev/null ||
    python3 -m pip install --quiet kubernetes-validate
  hash -r
  command -v kubernetes-validate >/dev/null 2>&1 || export PATH="$HOME/.local/bin:$PATH"
fi

if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH" && break
  done
fi
command -v cargo >/dev/null 2>&1 || {
  echo "setup: cargo not found; install a stable Rust toolchain (1.95 or newer) first" >&2
  exit 1
}
rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy >/dev/null 2>&1 || true
