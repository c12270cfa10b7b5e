#!/usr/bin/env bash
# Builds ps-lite with mlcc's progress hooks (patches/README.md).
#
#   build.sh [--flag on|off] [--work DIR] [--jobs N]
#       BytePS fork: downloads the byteps 0.2.5.post15 sdist from PyPI (once; cached in DIR),
#       takes its 3rdparty/ps-lite, applies byteps-ps-lite-mlcc.patch and builds libps.a and
#       tests/test_benchmark against Debian's libzmq3-dev (make DEPS_PATH=/usr).
#       --flag on builds with MLCC=1 (-DMLCC_PROGRESS), off without: the patched tree then
#       compiles to the unpatched library. Prints the tree's path on the last line of stdout.
#
#   build.sh --variant dmlc --src DIR [--flag on|off] [--deps DIR] [--no-build]
#       dmlc/ps-lite: applies dmlc-ps-lite-mlcc.patch to a checkout you provide (it is not on a
#       package registry) and runs its make with MLCC=1 (it needs protobuf: DEPS_PATH=--deps).
#
# DIR defaults to <mlcc>/target/mlcc-patches/ps-lite.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
progress_dir="$repo/patches/progress"

variant=byteps
flag=on
work="$repo/target/mlcc-patches/ps-lite"
src=""
deps=/usr
jobs="$(nproc 2>/dev/null || echo 2)"
build=1

while [ $# -gt 0 ]; do
  case "$1" in
    --flag) flag="$2"; shift 2 ;;
    --variant) variant="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --src) src="$2"; shift 2 ;;
    --deps) deps="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$flag" in
  on) make_flags=(MLCC=1 "MLCC_PROGRESS_DIR=$progress_dir") ;;
  off) make_flags=() ;;
  *) echo "build.sh: --flag on|off" >&2; exit 2 ;;
esac

apply_patch() { # <tree> <patch>
  (cd "$1" && patch -p1 --batch --forward --quiet < "$2")
}

if [ "$variant" = dmlc ]; then
  [ -n "$src" ] && [ -d "$src" ] || { echo "build.sh: --variant dmlc needs --src DIR (a dmlc/ps-lite checkout)" >&2; exit 2; }
  patch_file="$here/dmlc-ps-lite-mlcc.patch"
  if [ -f "$src/include/ps/internal/mlcc.h" ]; then
    echo "build.sh: $src already carries the mlcc patch" >&2
  else
    (cd "$src" && patch -p1 --batch --forward --dry-run --quiet < "$patch_file") || {
      echo "build.sh: $patch_file does not apply to $src" >&2; exit 1; }
    apply_patch "$src" "$patch_file"
  fi
  if [ "$build" = 1 ]; then
    make -C "$src" -j"$jobs" DEPS_PATH="$deps" "${make_flags[@]}" ps
  fi
  echo "$src"
  exit 0
fi

[ "$variant" = byteps ] || { echo "build.sh: --variant byteps|dmlc" >&2; exit 2; }

version=0.2.5.post15
sdist="byteps-$version.tar.gz"
# sha256 of the sdist PyPI serves for byteps==0.2.5.post15
sdist_sha256=9d6a3c5be4c4b5a172739744bb32725c433f9a9f63794e1885e7376ff4eea99f
patch_file="$here/byteps-ps-lite-mlcc.patch"
mkdir -p "$work"

if [ ! -f "$work/$sdist" ]; then
  echo "build.sh: downloading the byteps $version sdist from PyPI" >&2
  rm -rf "$work/dl" && mkdir -p "$work/dl"
  PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip download --quiet --no-deps --no-binary :all: \
    "byteps==$version" -d "$work/dl" >&2
  mv "$work/dl/$sdist" "$work/$sdist"
  rm -rf "$work/dl"
fi
echo "$sdist_sha256  $work/$sdist" | sha256sum -c --quiet - || {
  echo "build.sh: $work/$sdist does not have the expected sha256; delete it and retry" >&2; exit 1; }

# One tree per flag; re-extracted whenever the patch changes.
tree_root="$work/byteps-$flag"
tree="$tree_root/ps-lite"
stamp="$(sha256sum "$patch_file" | cut -d' ' -f1)"
if [ ! -f "$tree_root/.mlcc-stamp" ] || [ "$(cat "$tree_root/.mlcc-stamp")" != "$stamp" ]; then
  rm -rf "$tree_root" && mkdir -p "$tree_root"
  tar -xzf "$work/$sdist" -C "$tree_root" "byteps-$version/3rdparty/ps-lite"
  mv "$tree_root/byteps-$version/3rdparty/ps-lite" "$tree"
  rm -rf "$tree_root/byteps-$version"
  rm -f "$tree/.git" # a submodule pointer into byteps' repository
  apply_patch "$tree" "$patch_file"
  echo "$stamp" > "$tree_root/.mlcc-stamp"
fi

if [ "$build" = 1 ]; then
  [ -f /usr/include/zmq.h ] || { echo "build.sh: needs libzmq3-dev (scripts/setup.sh installs it)" >&2; exit 1; }
  make -C "$tree" -j"$jobs" DEPS_PATH=/usr "${make_flags[@]}" ps tests/test_benchmark >&2
fi
echo "$tree"
