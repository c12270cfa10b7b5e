#!/usr/bin/env bash
# Installs the Debian packages of scripts/package.sh for real, into a fresh Debian root, and
# checks what an operator relies on (run by scripts/test.sh; needs root):
#   - `dpkg -i` of all three into a debootstrap --variant=minbase root (plus libelf1, mlccd's
#     one dependency that minbase lacks; every other Depends must already be satisfied there);
#   - mlccd --version, mlccctl --help, mlcc-switchd --version, mlcc-bpf --help run in the root;
#   - `systemd-analyze verify` of the installed units, run on this host against the root's unit
#     files with /usr/sbin/ pointed at the root's binaries (minbase has no systemd; the same
#     trick as scripts/validate-deploy.sh), failing on any diagnostic;
#   - the NCCL plugin is found by its bare name on the root's loader path, as NCCL's dlopen finds
#     it, and replays patches/README.md's harness example with the same counters; a program built
#     against the installed /usr/include/mlcc_progress.h writes a progress file;
#   - the `mlcc` group exists (a system group), and /etc/mlcc;
#   - the maintainer scripts' systemd branch, against a stub systemctl (minbase has no systemd):
#     daemon-reload after the install, nothing ever enabled, started or restarted, an upgrade
#     while mlccd runs leaves it running and says so, `dpkg -r` stops both services, purge
#     removes the link `systemctl enable` made;
#   - `dpkg -r` then `dpkg -P` leave the root as it was before the install: every path, its type,
#     mode, owner and content, except dpkg's own database and log and shadow's backups
#     (/etc/group- etc., rewritten by groupadd/groupdel on any Debian system).
# Prints one JSON line: package sizes, the time from `dpkg -i` to a running `mlccd --version`,
# this test's own run time.
#
#   scripts/test-packages.sh [--profile dist|release|dev] [--no-build] [--debs DIR]
#
# --profile/--no-build are passed to scripts/package.sh; --debs DIR tests the .debs in DIR
# instead of building them. The root comes from a cached tarball,
# ${CARGO_TARGET_DIR:-target}/pkgtest/debootstrap-<suite>-<arch>-minbase+libelf1.tar.gz (the suite
# is this host's: the binaries need its glibc); the first run debootstraps it from
# MLCC_DEBIAN_MIRROR (default http://deb.debian.org/debian). Without root, debootstrap or a
# reachable mirror it says why and skips, except under CI=true, where that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

start_s=$(date +%s.%N)
skip() {
  if [ "${CI:-}" = true ]; then
    echo "test-packages: FAILED: cannot run under CI: $*" >&2
    exit 1
  fi
  echo "test-packages: SKIPPED: $*"
  exit 0
}
fail() {
  echo "test-packages: FAILED: $*" >&2
  exit 1
}

pkg_args=()
debs=
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) pkg_args+=(--profile "$2"); shift 2 ;;
    --no-build) pkg_args+=(--no-build); shift ;;
    --debs) debs=$2; shift 2 ;;
    *) echo "test-packages: unknown argument $1" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" -eq 0 ] || skip "needs root (debootstrap, chroot, dpkg in the root)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/setup.sh installs it)"
command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (scripts/setup.sh installs systemd)"

target_dir=${CARGO_TARGET_DIR:-target}
target_dir=$(mkdir -p "$target_dir" && cd "$target_dir" && pwd)
if [ -z "$debs" ]; then
  scripts/package.sh "${pkg_args[@]}" --out "$target_dir/debian"
  debs=$target_dir/debian
fi
arch=$(dpkg --print-architecture)
version=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
version=${MLCC_DEB_VERSION:-$version}
pkgs=(mlccd mlcc-switchd libnccl-profiler-mlcc)
for p in "${pkgs[@]}"; do
  [ -f "$debs/${p}_${version}_${arch}.deb" ] || fail "$debs/${p}_${version}_${arch}.deb is missing"
done

# --- the fresh root --------------------------------------------------------------------------
# shellcheck disable=SC1091 # the host's, read at run time
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$suite" ] || skip "cannot tell this host's Debian suite (no VERSION_CODENAME in /etc/os-release)"
mirror=${MLCC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
include=libelf1
mkdir -p "$target_dir/pkgtest"
cache=$target_dir/pkgtest/debootstrap-$suite-$arch-minbase+$include.tar.gz
# This script mounts nothing into the root (dpkg, groupadd and the binaries need no /proc
# there); debootstrap mounts /proc and /sys while it works and unmounts them, but a failed one
# may leave them: unmount whatever is under the root, deepest first, then remove it without
# crossing into another file system.
root=$(mktemp -d "$target_dir/pkgtest/root.XXXXXX")
scratch=$(mktemp -d)
cleanup() {
  local m
  awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while IFS= read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$root" "$scratch"
}
trap cleanup EXIT

root_s=cached
if [ ! -f "$cache" ]; then
  root_s=fresh
  echo "test-packages: debootstrap --variant=minbase --include=$include $suite from $mirror (cached in $cache)"
  deb_start=$(date +%s)
  if ! debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" \
    >"$scratch/debootstrap.log" 2>&1; then
    tail -n 20 "$scratch/debootstrap.log" >&2
    rm -f "$scratch/debootstrap.log"
    skip "debootstrap of $suite from $mirror failed (no network? see above)"
  fi
  rm -f "$scratch/debootstrap.log"
  echo "test-packages: debootstrap took $(($(date +%s) - deb_start)) s"
  # apt's downloaded .debs are not part of the root anyone gets.
  rm -f "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -czf "$cache.tmp" . && mv "$cache.tmp" "$cache"
else
  tar -C "$root" -xzf "$cache"
fi

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"; }
# What the maintainer scripts asked systemctl since the last call; fails on any request that
# would enable, start or restart a unit: the packages must never do that unasked.
systemctl_calls() {
  local log=$root/tmp/systemctl.log
  touch "$log"
  if grep -E '(^| )(enable|start|restart|try-restart|reload-or-restart|preset|unmask)( |$)' "$log" >&2; then
    fail "a maintainer script enabled, started or restarted a unit (above)"
  fi
  cat "$log"
  : >"$log"
}

# Everything about the root's files: type, mode, owner, path, and content (md5) for files.
# Skipped: dpkg's database and log (they record the install and removal by design), shadow's
# backups of the files groupadd/groupdel rewrite, ld.so's auxiliary cache, our scratch /tmp.
snapshot() {
  (cd "$root" && find . -xdev \
    \( -path ./var/lib/dpkg -o -path ./var/log -o -path ./tmp -o -path ./var/cache/ldconfig \
    -o -path ./proc -o -path ./sys -o -path ./dev \) -prune -o \
    \( -name 'group-' -o -name 'gshadow-' -o -name 'passwd-' -o -name 'shadow-' \) -prune -o \
    -printf '%y %m %U:%G %p\n' | sort)
  (cd "$root" && find . -xdev \
    \( -path ./var/lib/dpkg -o -path ./var/log -o -path ./tmp -o -path ./var/cache/ldconfig \
    -o -path ./proc -o -path ./sys -o -path ./dev \) -prune -o \
    \( -name 'group-' -o -name 'gshadow-' -o -name 'passwd-' -o -name 'shadow-' \) -prune -o \
    -type f -print0 | sort -z | xargs -0 md5sum)
}
# The maintainer scripts' systemd branch: they test /run/systemd/system to tell whether systemd
# runs; minbase has no systemd, so a stub systemctl first on the PATH logs what they ask of it
# (deb-systemd-invoke, which the scripts use to stop, execs systemctl from the PATH too). It and
# the directories are part of the root before the install, so they are no difference after it.
mkdir -p "$root/run/systemd/system" "$root/usr/local/sbin" "$root/etc/systemd/system/multi-user.target.wants"
cat >"$root/usr/local/sbin/systemctl" <<'STUB'
#!/bin/sh
echo "$*" >>/tmp/systemctl.log
case "$*" in *is-active*) [ -e /tmp/systemctl.active ] && exit 0 || exit 3 ;; esac
exit 0
STUB
chmod 0755 "$root/usr/local/sbin/systemctl"
snapshot >"$scratch/before"

# --- install -----------------------------------------------------------------------------------
mkdir -p "$root/tmp/pkgtest"
for p in "${pkgs[@]}"; do cp "$debs/${p}_${version}_${arch}.deb" "$root/tmp/pkgtest/"; done
echo "== dpkg -i ${pkgs[*]}"
t0=$(date +%s.%N)
in_root dpkg -i /tmp/pkgtest/mlccd_"${version}"_"$arch".deb \
  /tmp/pkgtest/mlcc-switchd_"${version}"_"$arch".deb \
  /tmp/pkgtest/libnccl-profiler-mlcc_"${version}"_"$arch".deb >"$scratch/dpkg.log" 2>&1 || {
  cat "$scratch/dpkg.log" >&2
  fail "dpkg -i"
}
out=$(in_root mlccd --version) || fail "mlccd --version in the root"
t1=$(date +%s.%N)
rm -f "$scratch/dpkg.log"
[ "$out" = "mlccd $version" ] || fail "mlccd --version printed '$out', not 'mlccd $version'"
echo "ok   mlccd --version: $out"
calls=$(systemctl_calls)
grep -qx daemon-reload <<<"$calls" || fail "no systemctl daemon-reload after the install: $calls"
echo "ok   maintainer scripts: systemctl daemon-reload, nothing enabled or started"

check() {
  local what=$1
  shift
  if out=$("$@" 2>&1); then
    echo "ok   $what"
  else
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    fail "$what"
  fi
}
check "mlccctl --help" sh -c "chroot '$root' /usr/bin/env -i PATH=/usr/bin:/bin mlccctl --help | grep -q '^Usage: mlccctl'"
check "mlcc-switchd --version" sh -c "[ \"\$(chroot '$root' /usr/sbin/mlcc-switchd --version)\" = 'mlcc-switchd $version' ]"
check "mlcc-bpf --help (attach-cgroup, unload)" sh -c "chroot '$root' /usr/sbin/mlcc-bpf --help | grep -q attach-cgroup"

ent=$(in_root getent group mlcc) || fail "no group mlcc after install"
gid=$(echo "$ent" | cut -d: -f3)
[ "$gid" -lt 1000 ] || fail "group mlcc has gid $gid, not a system group"
echo "ok   group mlcc (gid $gid)"
[ -d "$root/etc/mlcc" ] || fail "/etc/mlcc is missing"
echo "ok   /etc/mlcc"
for f in /usr/share/doc/mlccd/examples/mlccd.example.toml /usr/share/doc/mlccd/grafana/mlcc.json \
  /usr/share/doc/mlcc-switchd/examples/switchd.example.toml; do
  [ -f "$root$f" ] || fail "$f is missing"
done
echo "ok   examples and dashboard under /usr/share/doc"

echo "== systemd-analyze verify (installed units, binaries from the root)"
units=$scratch
for u in mlccd.service mlcc-switchd.service; do
  f=$root/usr/lib/systemd/system/$u
  [ -f "$f" ] || fail "$u is not installed in /usr/lib/systemd/system"
  grep -q '^ExecStart=/usr/sbin/' "$f" || fail "$u does not start a binary in /usr/sbin"
  sed "s#/usr/sbin/#$root/usr/sbin/#g" "$f" >"$units/$u"
  if ! out=$(systemd-analyze verify "$units/$u" 2>&1) || [ -n "$out" ]; then
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    fail "systemd-analyze verify $u"
  fi
  echo "ok   $u"
done

echo "== the NCCL plugin and the progress header"
# The harness's own "mlcc_progress.h" comes from the package (-iquote: only quoted includes
# look there, so the host's system headers stay the host's).
cc -std=gnu11 -O2 -Ipatches/nccl/profiler -iquote "$root/usr/include" \
  -o "$root/tmp/pkgtest/harness" patches/harness/c/nccl_profiler_harness.c -ldl
mkdir -p "$root/tmp/pkgtest/shm"
# patches/README.md's example: sent 2101152, received 2097152, iteration 2.
printf 'init 0 2 2\ncoll AllReduce 262144 ncclFloat32 0 1048576 1048576\np2p Send 1000 ncclFloat32 1 1\ncoll AllReduce 262144 ncclFloat32 0 1048576 1048576\n' |
  chroot "$root" /usr/bin/env -i MLCC_JOB_ID=pkgtest MLCC_SHM_DIR=/tmp/pkgtest/shm \
    /tmp/pkgtest/harness libnccl-profiler-mlcc.so 6 >"$units/harness.out" 2>&1 ||
  { cat "$units/harness.out" >&2; fail "the harness with libnccl-profiler-mlcc.so (by name)"; }
grep -q '^ok loaded ncclProfiler_v6 name=mlcc' "$units/harness.out" ||
  { cat "$units/harness.out" >&2; fail "the plugin did not load"; }
counters=$(od -An -t u8 -j 264 -N 24 "$root"/tmp/pkgtest/shm/mlcc.pkgtest.worker.0.* | xargs)
[ "$counters" = "2101152 2097152 2" ] || fail "plugin counters (sent recv iteration) '$counters', want '2101152 2097152 2'"
echo "ok   plugin loads by name and counts (sent recv iteration: $counters)"

cat >"$units/progress.c" <<'EOF'
#include <mlcc_progress.h>
int main(void) {
  if (mlcc_progress_open_env(MLCC_ROLE_WORKER, 3) != 0) return 1;
  mlcc_progress_add(MLCC_DIR_SEND, 1000);
  return 0; /* the file stays: no mlcc_progress_close() */
}
EOF
cc -std=gnu11 -I"$root/usr/include" -o "$root/tmp/pkgtest/progress" "$units/progress.c" ||
  fail "a program against the installed mlcc_progress.h does not compile"
chroot "$root" /usr/bin/env -i MLCC_JOB_ID=hdr MLCC_SHM_DIR=/tmp/pkgtest/shm /tmp/pkgtest/progress ||
  fail "the program built against mlcc_progress.h failed"
sent=$(od -An -t u8 -j 264 -N 8 "$root"/tmp/pkgtest/shm/mlcc.hdr.worker.3.* | xargs)
[ "$sent" = 1000 ] || fail "progress file from the header: sent '$sent', want 1000"
echo "ok   mlcc_progress.h from /usr/include writes a progress file"

echo "== upgrade (the same packages again) while mlccd runs, and removal"
touch "$root/tmp/systemctl.active"
out=$(in_root dpkg -i /tmp/pkgtest/mlccd_"${version}"_"$arch".deb 2>&1) || { echo "$out" >&2; fail "dpkg -i again"; }
rm -f "$root/tmp/systemctl.active"
grep -q 'mlccd.service still runs the previous version' <<<"$out" ||
  fail "postinst of an upgrade did not say that the running mlccd keeps the old binary: $out"
systemctl_calls >/dev/null
echo "ok   an upgrade leaves the running mlccd alone and says so"
rm -rf "$root/tmp/pkgtest"
# As `systemctl enable mlccd` would: the purge must remove the link.
ln -s /usr/lib/systemd/system/mlccd.service "$root/etc/systemd/system/multi-user.target.wants/mlccd.service"

# --- remove, purge -------------------------------------------------------------------------
echo "== dpkg -r, dpkg -P"
in_root dpkg -r "${pkgs[@]}" >/dev/null 2>&1 || fail "dpkg -r"
calls=$(systemctl_calls)
for u in mlccd.service mlcc-switchd.service; do
  grep -qx "stop $u" <<<"$calls" || fail "dpkg -r did not stop $u: $calls"
done
echo "ok   dpkg -r stops the services"
in_root getent group mlcc >/dev/null || fail "dpkg -r removed group mlcc (only purge may)"
snapshot >"$scratch/removed"
in_root dpkg -P "${pkgs[@]}" >/dev/null 2>&1 || fail "dpkg -P"
snapshot >"$scratch/purged"
systemctl_calls >/dev/null
if ! diff -u "$scratch/before" "$scratch/purged" >"$units/diff"; then
  sed 's/^/    /' "$units/diff" | head -n 60 >&2
  fail "dpkg -P left the root different from before the install (diff before → after purge above)"
fi
echo "ok   after dpkg -P the root is as before the install (group and enablement link gone)"
# After -r (no purge), only the group and the enablement link may differ: no conffiles.
diff "$scratch/before" "$scratch/removed" | grep -E '^[<>]' |
  grep -v -E ' \./etc/(group|gshadow|systemd/system/multi-user\.target\.wants/mlccd\.service)$' >"$units/diff" || true
if [ -s "$units/diff" ]; then
  sed 's/^/    /' "$units/diff" >&2
  fail "dpkg -r left files other than the mlcc group's and the enablement link"
fi
echo "ok   after dpkg -r only the group mlcc and the enablement link remain"

# --- report ------------------------------------------------------------------------------
sizes=
for p in "${pkgs[@]}"; do
  s=$(stat -c %s "$debs/${p}_${version}_${arch}.deb")
  i=$(dpkg-deb -f "$debs/${p}_${version}_${arch}.deb" Installed-Size)
  sizes+="${sizes:+, }\"$p\": {\"deb_bytes\": $s, \"installed_kib\": $i}"
done
printf '{"test": "packages", "suite": "%s", "root": "%s", "packages": {%s}, "dpkg_i_to_mlccd_version_s": %.2f, "test_s": %.1f}\n' \
  "$suite" "$root_s" "$sizes" "$(awk "BEGIN{print $t1 - $t0}")" \
  "$(awk "BEGIN{print $(date +%s.%N)-$start_s}")"
echo "test-packages: all checks passed"
