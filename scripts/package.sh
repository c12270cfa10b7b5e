#!/usr/bin/env bash
# Builds mlcc's three Debian packages from this checkout, into target/debian/ (more exactly
# ${CARGO_TARGET_DIR:-target}/debian, or --out DIR):
#
#   mlccd                  /usr/sbin/mlccd, /usr/bin/mlccctl, /usr/sbin/mlcc-bpf (the datapath
#                          CLI: attach-cgroup, unload), the systemd unit, the `mlcc` group
#                          (operators allowed to use mlccctl), example configs and topology,
#                          the Grafana dashboard. The BPF objects are compiled into mlccd and
#                          mlcc-bpf as skeletons: there is no object file to ship.
#   mlcc-switchd           /usr/sbin/mlcc-switchd, its systemd unit, example configs.
#   libnccl-profiler-mlcc  the NCCL profiler plugin (/usr/lib/<multiarch>/libnccl-profiler-mlcc.so,
#                          on the loader path: NCCL_PROFILER_PLUGIN=libnccl-profiler-mlcc.so
#                          finds it by name) and the progress header
#                          /usr/include/mlcc_progress.h.
#
#   scripts/package.sh [--profile dist|release|dev] [--no-build] [--out DIR]
#
# The default, dist, is release optimized across crates (Cargo.toml says what it buys).
# --profile dev packages the debug binaries (those `cargo test` already built), skipping an
# optimized build; --no-build packages what is already built.
# MLCC_DEB_VERSION overrides the version (default: the workspace's, from Cargo.toml).
#
# Why plain `dpkg-deb --build --root-owner-group` and not cargo-deb: cargo-deb is one more tool
# to compile (minutes on a 2-core CI machine) for what is here a dozen `install` lines per
# package, and one of the three packages is not a Rust crate at all (the plugin is built by
# make). dpkg-deb, dpkg-shlibdeps and strip come with dpkg-dev / binutils (build-essential),
# which scripts/setup.sh already installs. Depends are computed by dpkg-shlibdeps from the ELF
# files (libc6, libelf1, zlib1g, libgcc-s1 for mlccd) plus what the maintainer scripts call.
#
# Lintian (not run by CI) still reports, deliberately: unstripped-binary-or-object (the symbol
# table is kept, see bin() below), sharedobject-in-library-directory-missing-soname (a plugin,
# opened by file name), maintainer-script-calls-systemctl (`systemctl is-active`, a read-only
# query so postinst can say that a running service still runs the old binary), no-manual-page.
#
# Configuration is deliberately not a conffile: mlccd.toml must name this host and the
# topology describes the cluster, so there is no default that works. The examples go to
# /usr/share/doc/<package>/examples/, the admin writes /etc/mlcc/*.toml (which the packages
# never touch, not even on purge), and nothing is enabled or started by the packages.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=dist
build=1
out=
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$profile" in
  release | dist) profdir=$profile ;;
  dev | debug) profile=dev; profdir=debug ;;
  *) echo "package.sh: --profile must be dist, release or dev" >&2; exit 2 ;;
esac

for tool in dpkg-deb dpkg-shlibdeps strip make cc; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool not found (scripts/setup.sh installs it)" >&2; exit 1; }
done

target_dir=${CARGO_TARGET_DIR:-target}
out=${out:-$target_dir/debian}
bindir=$target_dir/$profdir
cargo_version=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
[ -n "$cargo_version" ] || { echo "package.sh: no version in Cargo.toml [workspace.package]" >&2; exit 1; }
version=${MLCC_DEB_VERSION:-$cargo_version}
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || cc -print-multiarch)
maintainer="mlcc developers <mlcc@users.noreply.github.com>"
homepage=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^repository *= *"\(.*\)"/\1/p' Cargo.toml)
# Reproducible timestamps (changelog date, file mtimes): the last commit's time. Not exported
# before cargo runs: crates whose build scripts read SOURCE_DATE_EPOCH (ring, libbpf-sys,
# mimalloc) would be rebuilt after every commit.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

if [ "$build" -eq 1 ]; then
  echo "package.sh: cargo build --profile $profile (mlccd, mlccctl, mlcc-bpf, mlcc-switchd)"
  cargo build --locked --profile "$profile" -p mlcc-scheduler -p mlcc-switch-emu -p mlcc-bpf \
    --bin mlccd --bin mlccctl --bin mlcc-switchd --bin mlcc-bpf
fi
for b in mlccd mlccctl mlcc-switchd mlcc-bpf; do
  [ -x "$bindir/$b" ] || { echo "package.sh: $bindir/$b not built (drop --no-build)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps wants to run in a source tree: a debian/ with a control file, the packages
# staged under debian/<package>/.
mkdir -p "$work/debian"
: >"$work/debian/control"

echo "package.sh: make -C patches/nccl/profiler"
mkdir -p "$work/plugin"
make -s -C patches/nccl/profiler OUT="$work/plugin"

mkdir -p "$out"

# --- helpers -------------------------------------------------------------------------------

# stage PKG: a fresh staging root for PKG, printed.
stage() {
  local root=$work/debian/$1
  mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$1"
  # Policy: every package carries its copyright and a changelog (changelog.gz: a version without
  # a Debian revision is a native package).
  cat >"$root/usr/share/doc/$1/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: mlcc
Source: $homepage

Files: *
Copyright: 2026 the mlcc developers
License: MIT or Apache-2.0

Files: bpf/src/bpf/*
Copyright: 2026 the mlcc developers
License: GPL-2.0 or MIT
Comment: the BPF programs mlccd loads into the kernel (declared "Dual MIT/GPL", which the
 kernel accepts for its GPL-only helpers).

License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.

License: GPL-2.0
 On Debian systems the full text of the GNU General Public License version 2 is in
 /usr/share/common-licenses/GPL-2.

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy of this software
 and associated documentation files (the "Software"), to deal in the Software without
 restriction, including without limitation the rights to use, copy, modify, merge, publish,
 distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
 Software is furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in all copies or
 substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
 BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
 NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
 DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
EOF
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  printf '%s (%s) unstable; urgency=medium\n\n  * Built by scripts/package.sh from commit %s.\n\n -- %s  %s\n' \
    "$1" "$version" "$commit" "$maintainer" "$(date -u -R -d "@$epoch")" |
    gzip -9n >"$root/usr/share/doc/$1/changelog.gz"
  echo "$root"
}

# unit SRC BINARY PACKAGE: deploy/SRC (which starts /usr/local/bin/BINARY, where a manual
# install puts it) as the package's unit, starting /usr/sbin/BINARY, with the "Install:" comment
# rewritten for the package. Fails if any /usr/local path is left.
unit() {
  local src=$1 bin=$2 pkg=$3 dst
  dst=$work/debian/$pkg/usr/lib/systemd/system/$(basename "$src")
  mkdir -p "$(dirname "$dst")"
  awk -v pkg="$pkg" -v bin="$bin" '
    /^# Install:/ { skip = 1
      print "# Installed by the Debian package " pkg ", which neither enables nor starts it. Configure"
      print "# /etc/mlcc (examples in /usr/share/doc/" pkg "/examples), then: systemctl enable --now " bin
      if (pkg == "mlccd")
        print "# Members of group mlcc (the package creates it) may run mlccctl if mlccd.toml has admin_group = \"mlcc\"."
      next }
    skip && /^#          / { next }
    { skip = 0; print }' "$src" | sed "s#/usr/local/bin/$bin#/usr/sbin/$bin#g" >"$dst"
  if grep -n /usr/local "$dst"; then
    echo "package.sh: $src still names /usr/local after rewriting (above)" >&2
    exit 1
  fi
  chmod 0644 "$dst"
}

# maint PKG UNIT: maintainer scripts shared by the two daemons. They reload systemd (when it
# runs) so that it sees the new or removed unit, stop the service when the package is removed
# (its binary is about to go), never enable, start or restart it, and on purge remove the
# enablement links `systemctl enable` made (the unit file they point to is gone).
maint() {
  local pkg=$1 unit=$2 root=$work/debian/$1/DEBIAN
  cat >"$root/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
$(extra_postinst "$pkg")
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    # An upgrade leaves a running $unit on the old binary: restarting it is the operator's call.
    if [ -n "\$2" ] && systemctl is-active --quiet $unit; then
      echo "$pkg: $unit still runs the previous version; systemctl restart $unit to switch"
    fi
  fi
fi
exit 0
EOF
  cat >"$root/prerm" <<EOF
#!/bin/sh
set -e
if [ "\$1" = remove ] && [ -d /run/systemd/system ]; then
  # deb-systemd-invoke (init-system-helpers, Essential) honours policy-rc.d, as in image builds.
  deb-systemd-invoke stop $unit >/dev/null || true
fi
exit 0
EOF
  cat >"$root/postrm" <<EOF
#!/bin/sh
set -e
case "\$1" in
  remove | purge)
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
    ;;
esac
if [ "\$1" = purge ]; then
  for link in /etc/systemd/system/*.wants/$unit /etc/systemd/system/*.requires/$unit; do
    if [ -L "\$link" ]; then rm -f "\$link"; fi
  done
$(extra_postrm_purge "$pkg")
fi
exit 0
EOF
  chmod 0755 "$root/postinst" "$root/prerm" "$root/postrm"
}

extra_postinst() {
  [ "$1" = mlccd ] || { echo "  :"; return; }
  cat <<'EOF'
  # Operators in group mlcc may use mlccctl once mlccd.toml says admin_group = "mlcc".
  if ! getent group mlcc >/dev/null; then
    groupadd --system mlcc
  fi
EOF
}

extra_postrm_purge() {
  [ "$1" = mlccd ] || { echo "  :"; return; }
  cat <<'EOF'
  # The group postinst created goes, unless an admin has put users in it (their data), or it is
  # not a system group (an admin made it before the package did).
  ent=$(getent group mlcc || true)
  if [ -n "$ent" ]; then
    gid=$(echo "$ent" | cut -d: -f3)
    members=$(echo "$ent" | cut -d: -f4)
    if [ -z "$members" ] && [ "$gid" -lt 1000 ] && command -v groupdel >/dev/null; then
      groupdel mlcc
    else
      echo "mlccd: keeping group mlcc (members: ${members:-none}, gid $gid)"
    fi
  fi
EOF
}

# control PKG SECTION DEPENDS DESCRIPTION-LINES...: DEBIAN/control, md5sums, then the .deb.
# DEPENDS is added to what dpkg-shlibdeps finds for the package's ELF files.
finish() {
  local pkg=$1 section=$2 extra=$3 root=$work/debian/$1
  shift 3
  local elves=() f shlibs deps size
  while IFS= read -r -d '' f; do
    if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then elves+=("$f"); fi
  done < <(find "$root" -path "$root/DEBIAN" -prune -o -type f -print0)
  shlibs=
  if [ ${#elves[@]} -gt 0 ]; then
    shlibs=$(cd "$work" && dpkg-shlibdeps -O -T/dev/null "${elves[@]/#$work\//}" 2>/dev/null |
      sed -n 's/^shlibs:Depends=//p')
  fi
  deps=$(printf '%s\n' "$shlibs" "$extra" | tr ',' '\n' | sed 's/^ *//; s/ *$//' | sed '/^$/d' |
    sort -u | paste -sd, | sed 's/,/, /g')
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  {
    echo "Package: $pkg"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: $maintainer"
    echo "Installed-Size: $size"
    [ -z "$deps" ] || echo "Depends: $deps"
    echo "Section: $section"
    echo "Priority: optional"
    echo "Homepage: $homepage"
    echo "Description: $1"
    shift
    for line in "$@"; do echo " $line"; done
  } >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 -r md5sum >DEBIAN/md5sums)
  find "$root" -exec touch -h -d "@$epoch" {} +
  rm -f "$out/${pkg}"_*.deb
  SOURCE_DATE_EPOCH=$epoch dpkg-deb --build --root-owner-group -Zxz "$root" "$out/${pkg}_${version}_${arch}.deb" >/dev/null
  echo "package.sh: $out/${pkg}_${version}_${arch}.deb ($(du -k "$out/${pkg}_${version}_${arch}.deb" | cut -f1) KiB)"
}

# Binaries lose their DWARF (line tables) but keep their symbol table, so a panic's backtrace
# still names functions: a quarter of the size.
bin() { install -D -m 0755 "$1" "$2" && strip --strip-debug "$2"; }

# --- mlccd ---------------------------------------------------------------------------------
root=$(stage mlccd)
bin "$bindir/mlccd" "$root/usr/sbin/mlccd"
bin "$bindir/mlcc-bpf" "$root/usr/sbin/mlcc-bpf"
bin "$bindir/mlccctl" "$root/usr/bin/mlccctl"
unit deploy/mlccd.service mlccd mlccd
install -d -m 0755 "$root/etc/mlcc"
ex=$root/usr/share/doc/mlccd/examples
install -D -m 0644 deploy/mlccd.example.toml "$ex/mlccd.example.toml"
install -D -m 0644 deploy/topology.example.toml "$ex/topology.example.toml"
install -D -m 0644 deploy/examples/cluster-2rack/mlccd.toml "$ex/cluster-2rack/mlccd.toml"
install -D -m 0644 deploy/examples/cluster-2rack/topology.toml "$ex/cluster-2rack/topology.toml"
install -D -m 0644 deploy/grafana/mlcc.json "$root/usr/share/doc/mlccd/grafana/mlcc.json"
for doc in deploy/README.md deploy/SECURITY.md; do
  [ ! -f "$doc" ] || install -D -m 0644 "$doc" "$root/usr/share/doc/mlccd/$(basename "$doc")"
done
maint mlccd mlccd.service
finish mlccd net "passwd" \
  "mlcc per-host scheduler of distributed DNN training traffic" \
  "mlccd plans every inter-server training flow's sending rate slot by slot," \
  "so that co-located jobs stagger their gradient bursts, and paces each flow" \
  "in the kernel with a BPF congestion control. mlccctl inspects it; mlcc-bpf" \
  "loads, attaches (the cgroup selector) and unloads the BPF datapath." \
  "The systemd unit is installed but neither enabled nor started."

# --- mlcc-switchd --------------------------------------------------------------------------
root=$(stage mlcc-switchd)
bin "$bindir/mlcc-switchd" "$root/usr/sbin/mlcc-switchd"
unit deploy/mlcc-switchd.service mlcc-switchd mlcc-switchd
install -d -m 0755 "$root/etc/mlcc"
ex=$root/usr/share/doc/mlcc-switchd/examples
install -D -m 0644 deploy/switchd.example.toml "$ex/switchd.example.toml"
install -D -m 0644 deploy/topology.example.toml "$ex/topology.example.toml"
install -D -m 0644 deploy/examples/cluster-2rack/switchd.toml "$ex/cluster-2rack/switchd.toml"
install -D -m 0644 deploy/examples/cluster-2rack/topology.toml "$ex/cluster-2rack/topology.toml"
maint mlcc-switchd mlcc-switchd.service
finish mlcc-switchd net "" \
  "mlcc switch emulator: the K-slot link load table of one switch over gRPC" \
  "One mlcc-switchd per top-of-rack switch that cannot be programmed keeps" \
  "the load the mlccd schedulers booked on its links. The systemd unit is" \
  "installed but neither enabled nor started."

# --- libnccl-profiler-mlcc -----------------------------------------------------------------
root=$(stage libnccl-profiler-mlcc)
install -D -m 0644 "$work/plugin/libnccl-profiler-mlcc.so" "$root/usr/lib/$multiarch/libnccl-profiler-mlcc.so"
strip --strip-debug "$root/usr/lib/$multiarch/libnccl-profiler-mlcc.so"
install -D -m 0644 patches/progress/mlcc_progress.h "$root/usr/include/mlcc_progress.h"
install -D -m 0644 patches/README.md "$root/usr/share/doc/libnccl-profiler-mlcc/README.md"
# No ldconfig trigger: the plugin has no SONAME (NCCL dlopens it by file name), so ld.so.cache
# has nothing to record (lintian: package-has-unnecessary-activation-of-ldconfig-trigger).
finish libnccl-profiler-mlcc libs "" \
  "NCCL profiler plugin that reports training progress to mlccd" \
  "Loaded by stock NCCL >= 2.23 (NCCL_PROFILER_PLUGIN=libnccl-profiler-mlcc.so)," \
  "it writes the progress file mlccd reads (bytes per iteration, iterations)" \
  "from NCCL's network transfers. Also ships mlcc_progress.h, the header-only" \
  "writer of that file, for other communication libraries."

ls -l "$out"/*.deb
