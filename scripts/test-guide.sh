#!/usr/bin/env bash
# Runs the operator's guide, deploy/README.md, for real: boots systemd in a fresh Debian root
# (systemd-nspawn) and runs the guide's commands in it, section by section — install the
# packages with apt, write the topology, mlcc-switchd and mlccd under systemd, an operator in
# the admin group, a job in a systemd slice whose TCP socket lands on the CC and whose flow
# mlccd plans, every check command, upgrade with the pinned datapath surviving the restart,
# reload of the datapath, rollback, uninstall. Run by scripts/test.sh after
# scripts/test-packages.sh (needs root).
#
# Every command run as the guide's is looked up verbatim in deploy/README.md first: a command
# the guide no longer has fails the test, so the two cannot drift apart. What the test adds
# around them is marked "(test)" in its output: the answers an operator gives (apt's yes, the
# editor's edits — plus, as the guide's troubleshooting says for a second datapath, a CC name of
# the test's own, since CC names are global on the machine), a user `alice`, and the job, a small
# program against the installed mlcc_progress.h standing in for `torchrun` (no GPU, no NCCL).
#
# The container: the debootstrap root of scripts/test-packages.sh plus systemd, curl and
# iproute2 (cached as ${CARGO_TARGET_DIR:-target}/pkgtest/guide-<suite>-<arch>.tar.gz), a
# private network (loopback only: the test gives it h1's and h2's addresses), the cgroup v2
# hierarchy, and a bpffs of its own (a fresh instance: its pins are the test's alone).
#
# Not exercised, and why: `kubectl` (no Kubernetes cluster here, and no registry carries
# kubectl), the Grafana import (no registry carries Grafana), `torchrun` (no GPU: the job
# above stands in), `./scripts/setup.sh` and `./scripts/package.sh` (run by scripts/test.sh and
# scripts/test-packages.sh before this).
#
#   scripts/test-guide.sh [--debs DIR]     (default: ${CARGO_TARGET_DIR:-target}/debian)
#
# Without root, systemd-nspawn, the packages or the cached root it says why and skips, except
# under CI=true, where that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
guide_md=$repo/deploy/README.md

start_s=$(date +%s.%N)
skip() {
  if [ "${CI:-}" = true ]; then
    echo "test-guide: FAILED: cannot run under CI: $*" >&2
    exit 1
  fi
  echo "test-guide: SKIPPED: $*"
  exit 0
}
fail() {
  echo "test-guide: FAILED: $*" >&2
  if [ -n "${root:-}" ] && [ -n "${init:-}" ]; then
    echo "--- journal of mlccd and mlcc-switchd in the container (last 30 lines)" >&2
    ns journalctl --no-pager -n 30 -u mlccd -u mlcc-switchd >&2 2>&1 || true
  fi
  exit 1
}

target_dir=${CARGO_TARGET_DIR:-target}
target_dir=$(mkdir -p "$target_dir" && cd "$target_dir" && pwd)
debs=$target_dir/debian
while [ $# -gt 0 ]; do
  case "$1" in
    --debs) debs=$2; shift 2 ;;
    *) echo "test-guide: unknown argument $1" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" -eq 0 ] || skip "needs root (systemd-nspawn, bpffs)"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn is not installed (scripts/setup.sh installs systemd-container)"
command -v bpftool >/dev/null || skip "bpftool is not installed (scripts/setup.sh installs it)"
arch=$(dpkg --print-architecture)
# shellcheck disable=SC1091 # the host's, read at run time
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
version=$(sed -n '/^\[workspace\.package\]/,/^\[/ s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
for p in mlccd mlcc-switchd libnccl-profiler-mlcc; do
  [ -f "$debs/${p}_${version}_${arch}.deb" ] || skip "$debs/${p}_${version}_${arch}.deb is missing (scripts/package.sh builds it)"
done
minbase=$target_dir/pkgtest/debootstrap-$suite-$arch-minbase+libelf1.tar.gz
[ -f "$minbase" ] || skip "$minbase is missing (scripts/test-packages.sh makes it)"

# --- the root, the bpffs, the container ------------------------------------------------------
root=$(mktemp -d "$target_dir/pkgtest/guide.XXXXXX")
scratch=$(mktemp -d)
machine=mlccguide$$
cc=mlccg$$
nspawn_pid=
init=
cleanup() {
  local m
  # Killing the container's init ends its whole PID namespace (killing systemd-nspawn alone
  # would leave the container running); nspawn then exits.
  [ -z "$init" ] || kill -KILL "$init" 2>/dev/null || true
  if [ -n "$nspawn_pid" ]; then
    kill -KILL "$nspawn_pid" 2>/dev/null || true
    wait "$nspawn_pid" 2>/dev/null || true
  fi
  # The private bpffs holds the datapath's pins: unmounting it drops the last reference to the
  # CC, which the kernel then unregisters.
  umount -l "$scratch/bpffs" 2>/dev/null || true
  awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while IFS= read -r m; do umount -l "$m" || true; done
  rm -rf --one-file-system "$root" "$scratch"
}
trap cleanup EXIT

# The container's packages beyond minbase (no dbus: nothing here needs it, root's systemctl and
# systemd-run talk to systemd directly). The list is in the cache's name.
extra="systemd systemd-sysv curl iproute2"
cache=$target_dir/pkgtest/guide-$suite-$arch-$(echo "$extra" | md5sum | cut -c1-8).tar.gz
root_s=cached
if [ ! -f "$cache" ] || [ "$cache" -ot "$minbase" ]; then
  root_s=fresh
  echo "test-guide: $minbase + $extra (cached in $cache)"
  tar -C "$root" -xzf "$minbase"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  if ! chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $extra" \
    >"$scratch/apt.log" 2>&1; then
    tail -n 20 "$scratch/apt.log" >&2
    skip "apt-get in the root failed (no network? see above)"
  fi
  rm -f "$root"/var/cache/apt/archives/*.deb
  # Nobody logs in (runuser needs no logind), and logind without dbus would hold the boot.
  ln -sf /dev/null "$root/etc/systemd/system/systemd-logind.service"
  tar -C "$root" -czf "$cache.tmp" . && mv "$cache.tmp" "$cache"
else
  tar -C "$root" -xzf "$cache"
fi

# mktemp's 0700 (also what the tarballs record for "./") would keep every service user out of
# the container's /.
chmod 0755 "$root"
# What an operator answers at apt's prompts: yes, also to §8's downgrade.
printf 'APT::Get::Assume-Yes "true";\nAPT::Get::allow-downgrades "true";\n' >"$root/etc/apt/apt.conf.d/90mlcc-guide-test"
# The checkout's target/debian (§1 runs from the checkout), and §8's two versions in /root: the
# next version is this one with its version field raised (the same binaries: what is tested is
# what dpkg and the maintainer scripts do across versions).
mkdir -p "$root/root/mlcc/target/debian"
cp "$debs"/*_"${version}"_"$arch".deb "$root/root/mlcc/target/debian/"
cp "$debs/mlccd_${version}_${arch}.deb" "$root/root/"
next=0.2.0
[ "$version" != "$next" ] || fail "the workspace version is already $next: raise §8's example"
dpkg-deb -R "$debs/mlccd_${version}_${arch}.deb" "$scratch/next"
sed -i "s/^Version: .*/Version: $next/" "$scratch/next/DEBIAN/control"
dpkg-deb --root-owner-group -b "$scratch/next" "$root/root/mlccd_${next}_${arch}.deb" >/dev/null

# The job (test): a worker of resnet-42 that writes its progress through the installed header
# and sends over TCP from h1's address to h2's, one 4 MB iteration every 100 ms.
cat >"$scratch/job.c" <<'EOF'
#include <arpa/inet.h>
#include <mlcc_progress.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
static int addr(struct sockaddr_in *a, const char *ip, int port) {
  memset(a, 0, sizeof *a);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  return inet_pton(AF_INET, ip, &a->sin_addr) == 1 ? 0 : -1;
}
int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 45123;
  struct sockaddr_in srv, cli;
  int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), s = socket(AF_INET, SOCK_STREAM, 0);
  if (addr(&srv, "10.0.0.2", port) || addr(&cli, "10.0.0.1", 0)) return 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(l, (void *)&srv, sizeof srv) || listen(l, 1)) { perror("listen"); return 1; }
  if (bind(s, (void *)&cli, sizeof cli) || connect(s, (void *)&srv, sizeof srv)) { perror("connect"); return 1; }
  int r = accept(l, NULL, NULL);
  if (r < 0 || mlcc_progress_open_env(MLCC_ROLE_WORKER, 0) != 0) return 1;
  static char buf[1 << 16];
  for (int it = 0; it < 600; it++) {
    mlcc_iteration_begin();
    for (int k = 0; k < 64; k++) {
      if (send(s, buf, sizeof buf, 0) != (ssize_t)sizeof buf) return 1;
      mlcc_progress_add(MLCC_DIR_SEND, sizeof buf);
      for (size_t got = 0; got < sizeof buf;) {
        ssize_t n = recv(r, buf, sizeof buf - got, 0);
        if (n <= 0) return 1;
        got += (size_t)n;
      }
    }
    usleep(100000);
  }
  return 0;
}
EOF
# The header as the package installs it (scripts/test-packages.sh checks that they are the same).
cc -std=gnu11 -O1 -I"$repo/patches/progress" -o "$root/root/job" "$scratch/job.c" ||
  fail "the test's job does not compile"

mkdir -p "$scratch/bpffs"
mount -t bpf bpf "$scratch/bpffs"
SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn -q --register=no --keep-unit -D "$root" -M "$machine" \
  --capability=all --system-call-filter='bpf perf_event_open' --private-network \
  --bind="$scratch/bpffs:/sys/fs/bpf" -b >"$scratch/console.log" 2>&1 </dev/null &
nspawn_pid=$!
# The container's init: the first of systemd-nspawn's children or grandchildren in a PID
# namespace other than ours. Not simply its first child: nspawn forks an outer child that
# forks init into the new namespace and exits (init is then reparented to nspawn), so the
# first child seen can be that short-lived outer one (a CI run waited 60 s on a dead PID).
our_pidns=$(readlink /proc/$$/ns/pid)
find_init() {
  local p c ns
  for p in $(pgrep -P "$nspawn_pid" || true); do
    for c in "$p" $(pgrep -P "$p" || true); do
      ns=$(readlink "/proc/$c/ns/pid" 2>/dev/null || true)
      if [ -n "$ns" ] && [ "$ns" != "$our_pidns" ]; then
        echo "$c"
        return
      fi
    done
  done
}
for _ in $(seq 1 100); do
  init=$(find_init)
  [ -n "$init" ] && break
  sleep 0.1
done
[ -n "$init" ] || { cat "$scratch/console.log" >&2; fail "systemd-nspawn did not start the container"; }
ns() { nsenter -t "$init" -a -- /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C HOME=/root "$@"; }
state=
for _ in $(seq 1 300); do
  # Found as it was being reparented, init keeps its PID; a vanished one is looked up again.
  { [ -n "$init" ] && [ -d "/proc/$init" ]; } || init=$(find_init)
  state=$(ns systemctl is-system-running 2>/dev/null || true)
  case "$state" in running | degraded) break ;; esac
  sleep 0.2
done
case "$state" in running | degraded) ;; *) cat "$scratch/console.log" >&2; fail "systemd in the container: '$state'" ;; esac
echo "ok   systemd boots in the container ($state)"

# The guide's command lines, leading blanks and trailing comments ("  # ...") stripped.
guide_lines=$scratch/guide-lines
sed -e 's/^[[:space:]]*//' -e 's/[[:space:]][[:space:]]*#.*$//' "$guide_md" >"$guide_lines"
# A command line of a code block, or a command quoted inline (`...`) in the text.
in_guide() {
  grep -qxF -- "$(sed -e 's/[[:space:]][[:space:]]*#.*$//' <<<"$1")" "$guide_lines" ||
    grep -qF -- "\`$1\`" "$guide_md"
}
# The guide's commands: each must be in deploy/README.md verbatim; run in $cwd as root with the
# guide's exports (§5) in the environment.
cwd=/root
exports=
guide() { # command [what the test runs after it in the same shell]
  local cmd=$1 then=${2:-}
  in_guide "$cmd" || fail "not in deploy/README.md (the guide changed?): $cmd"
  echo "     \$ $cmd${then:+
       (test) $then}"
  if ! out=$(ns sh -c "cd $cwd && $exports $cmd${then:+
$then}" 2>&1); then
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    fail "the guide's command failed: $cmd"
  fi
  [ -z "$out" ] || printf '%s\n' "$out" | head -n 12 | sed 's/^/       /'
}
# The guide's command with a placeholder of the guide's replaced (e.g. `torchrun ...` by the job).
guide_with() { # command placeholder replacement
  local cmd=$1 from=$2 to=$3
  in_guide "$cmd" || fail "not in deploy/README.md (the guide changed?): $cmd"
  echo "     \$ $cmd"
  echo "       (test) with '$from' → '$to'"
  if ! out=$(ns sh -c "cd $cwd && $exports ${cmd/"$from"/"$to"}" 2>&1); then
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    fail "the guide's command failed: $cmd"
  fi
}
# A check of the test's own: must succeed.
expect() {
  local what=$1
  shift
  if out=$(ns sh -c "$*" 2>&1); then
    echo "ok   $what"
  else
    printf '%s\n' "$out" | sed 's/^/    /' >&2
    fail "$what"
  fi
}
wait_for() { # what, command: retried for 10 s
  local what=$1
  shift
  for _ in $(seq 1 50); do
    ns sh -c "$*" >/dev/null 2>&1 && { echo "ok   $what"; return 0; }
    sleep 0.2
  done
  ns sh -c "$*" >&2 || true
  fail "$what (10 s)"
}

echo "== §1 install"
cwd=/root/mlcc
guide "apt install ./target/debian/mlccd_${version}_amd64.deb ./target/debian/libnccl-profiler-mlcc_${version}_amd64.deb   # GPU hosts"
guide "apt install ./target/debian/mlcc-switchd_${version}_amd64.deb                                                  # switch emulators"
expect "mlccd, mlccctl, mlcc-bpf, mlcc-switchd installed; nothing enabled or started" \
  "mlccd --version && mlccctl --help >/dev/null && mlcc-bpf --help >/dev/null && mlcc-switchd --version &&
   ! systemctl is-enabled mlccd && ! systemctl is-active mlccd && ! systemctl is-active mlcc-switchd"
cwd=/root

echo "== §2 topology"
guide "cp /usr/share/doc/mlccd/examples/cluster-2rack/topology.toml /etc/mlcc/topology.toml    # 2 racks + spine, mTLS"
guide "cp /usr/share/doc/mlccd/examples/topology.example.toml /etc/mlcc/topology.toml          # 6 hosts, 1 ToR"

echo "== §3 mlcc-switchd"
guide "cp /usr/share/doc/mlcc-switchd/examples/switchd.example.toml /etc/mlcc/switchd.toml"
echo "     (test) \$EDITOR /etc/mlcc/switchd.toml: switch = \"tor1\" (the example's already)"
expect "switchd.toml names tor1" "grep -qx 'switch = \"tor1\"' /etc/mlcc/switchd.toml"
guide "systemctl enable --now mlcc-switchd"
wait_for "mlcc-switchd serves metrics" "curl -sf http://localhost:9461/metrics >/dev/null"
guide "curl -s http://localhost:9461/metrics | grep '^mlcc_switch_slot'"

echo "== §4 mlccd"
guide "cp /usr/share/doc/mlccd/examples/mlccd.example.toml /etc/mlcc/mlccd.toml"
echo "     (test) \$EDITOR /etc/mlcc/mlccd.toml: host = \"h1\", admin_group = \"mlcc\", bpf_cc_name = \"$cc\""
# Top-level keys go before the example's [peers] table.
expect "mlccd.toml edited" "grep -qx 'host = \"h1\"' /etc/mlcc/mlccd.toml &&
  sed -i '1i admin_group = \"mlcc\"\\nbpf_cc_name = \"$cc\"' /etc/mlcc/mlccd.toml"
expect "(test) user alice" "useradd -m alice"
guide "usermod -aG mlcc alice"
# The job's hosts (test): h1 and h2 of the topology on this loopback-only network.
expect "(test) h1's and h2's addresses on lo" "ip addr add 10.0.0.1/32 dev lo && ip addr add 10.0.0.2/32 dev lo"
guide "systemctl enable --now mlccd"
wait_for "mlccd is active (Type=notify: ready)" "systemctl is-active mlccd"
guide "mlccctl status"
expect "alice (in group mlcc) runs mlccctl status" "runuser -u alice -- mlccctl status | grep -q 'degraded'"
expect "a user outside the group may not" "useradd bob && ! runuser -u bob -- mlccctl status"
expect "the CC is registered, pinned in the bpffs" "grep -qw $cc /proc/sys/net/ipv4/tcp_available_congestion_control && ls /sys/fs/bpf/mlcc | grep -q ."

echo "== §5 a job"
guide "mkdir -p /sys/fs/cgroup/mlcc-jobs"
guide "mlcc-bpf attach-cgroup /sys/fs/cgroup/mlcc-jobs"
exports="export MLCC_JOB_ID=resnet-42 MLCC_JOB_ARCH=allreduce MLCC_MODEL_BYTES=102400000; export MLCC_TOTAL_ITERATIONS=5000;"
if ! grep -qF "export MLCC_JOB_ID=resnet-42 MLCC_JOB_ARCH=allreduce MLCC_MODEL_BYTES=102400000" "$guide_md" ||
  ! grep -qF "export MLCC_TOTAL_ITERATIONS=5000" "$guide_md"; then
  fail "the guide's exports changed"
fi
guide "echo \$\$ > /sys/fs/cgroup/mlcc-jobs/cgroup.procs        # then start the job from this shell" \
  "exec /root/job >/root/job.log 2>&1 &"
wait_for "the job's socket from 10.0.0.1 is on the CC $cc" "ss -tinH dst 10.0.0.2:45123 | grep -qw $cc"
wait_for "mlccctl jobs lists resnet-42" "mlccctl jobs | grep -q resnet-42"
wait_for "mlccctl flows plans its flow h1→h2" "mlccctl flows --job resnet-42 --json | grep -q '\"h2\"'"
# Under systemd, a slice; the job (port 45124) for torchrun.
guide "systemd-run --scope --slice=mlccjobs.slice -- true     # creates /sys/fs/cgroup/mlccjobs.slice"
guide "mlcc-bpf attach-cgroup /sys/fs/cgroup/mlccjobs.slice"
guide_with "systemd-run --scope --slice=mlccjobs.slice -- torchrun ..." "torchrun ..." "/root/job 45124 >/root/job2.log 2>&1 &"
wait_for "the slice's job socket is on the CC $cc" "ss -tinH dst 10.0.0.2:45124 | grep -qw $cc"
guide "mlcc-bpf detach-cgroup /sys/fs/cgroup/mlcc-jobs"
guide "echo \$\$ > /sys/fs/cgroup/mlcc-jobs/cgroup.procs        # then start the job from this shell" \
  "exec /root/job 45125 >/root/job3.log 2>&1 &"
wait_for "after detach-cgroup a new socket there stays on the kernel's CC" \
  "ss -tinH dst 10.0.0.2:45125 | grep -q . && ! ss -tinH dst 10.0.0.2:45125 | grep -qw $cc"
guide "mlcc-bpf attach-cgroup /sys/fs/cgroup/mlcc-jobs"

echo "== §6 check"
for c in "mlccctl status" "mlccctl jobs" "mlccctl flows --job resnet-42" "mlccctl switches" "mlcc-bpf stats"; do
  guide "$c"
done
expect "mlccctl top refreshes until interrupted, showing the job's flow" "timeout -s INT 2.5 mlccctl top >/tmp/top.out; grep -c 'slot' /tmp/top.out | grep -qv '^[01]$' && grep -q resnet-42 /tmp/top.out"
expect "every mlccctl command takes --json" "for c in status jobs flows switches; do mlccctl \$c --json | head -c1 | grep -q '[[{]' || exit 1; done"

echo "== §8 upgrade and roll back"
pid0=$(ns systemctl show -P MainPID mlccd)
ids0=$(ls -i "$scratch/bpffs/mlcc" | sort | tr '\n' ' ')
guide "apt install ./mlccd_${next}_amd64.deb     # replaces the binaries; the running mlccd keeps running"
expect "the upgrade left mlccd running (same PID $pid0) and now at $next" \
  "[ \"\$(systemctl show -P MainPID mlccd)\" = $pid0 ] && dpkg-query -W -f='\${Version}' mlccd | grep -qx $next"
guide "systemctl restart mlccd                 # when you choose"
wait_for "mlccd is active again" "systemctl is-active mlccd"
ids1=$(ls -i "$scratch/bpffs/mlcc" | sort | tr '\n' ' ')
[ "$ids0" = "$ids1" ] || fail "the pins changed across the restart: $ids0 → $ids1"
echo "ok   the pinned datapath (programs, maps, cgroup links) survived the restart unchanged"
wait_for "the job's socket is still on $cc" "ss -tinH dst 10.0.0.2:45123 | grep -qw $cc"
guide "systemctl stop mlccd && mlcc-bpf unload && systemctl start mlccd   # flows on Reno meanwhile"
wait_for "mlccd loaded the datapath again" "systemctl is-active mlccd && grep -qw $cc /proc/sys/net/ipv4/tcp_available_congestion_control"
guide "mlcc-bpf attach-cgroup /sys/fs/cgroup/mlcc-jobs                    # unload detached the cgroups"
guide "apt install ./mlccd_${version}_amd64.deb"
guide "systemctl restart mlccd"
wait_for "rolled back: mlccd $version active" "systemctl is-active mlccd && dpkg-query -W -f='\${Version}' mlccd | grep -qx $version"

echo "== §9 uninstall"
expect "(test) stop the job" "for p in /proc/[0-9]*; do [ \"\$(readlink \$p/exe)\" = /root/job ] && kill \${p#/proc/}; done; true"
guide "systemctl disable --now mlccd"
guide "mlcc-bpf unload                          # unregister the CC, detach the cgroups, remove the pins"
guide "apt purge mlccd libnccl-profiler-mlcc    # hosts"
guide "systemctl disable --now mlcc-switchd && apt purge mlcc-switchd   # switch emulators"
# (maps.debug and progs.debug are the kernel's own, in every bpffs.)
expect "the bpffs holds nothing of mlcc" "ls -A /sys/fs/bpf; [ -z \"\$(ls -A /sys/fs/bpf | grep -v '^\(maps\|progs\)\.debug\$')\" ]"
# The kernel frees a detached struct_ops map after an RCU grace period: give it a moment.
wait_for "the CC $cc is unregistered" "! grep -qw $cc /proc/sys/net/ipv4/tcp_available_congestion_control"
expect "binaries and units gone, nothing running" \
  "! command -v mlccd && ! command -v mlcc-switchd && ! command -v mlccctl && ! command -v mlcc-bpf &&
   ! [ -e /lib/systemd/system/mlccd.service ] && ! [ -e /lib/systemd/system/mlcc-switchd.service ] &&
   ! systemctl is-active mlccd mlcc-switchd"
# The guide: purge removes the group unless users were put in it (alice was); /etc/mlcc stays.
expect "the group mlcc kept for its member alice, /etc/mlcc kept" \
  "getent group mlcc | grep -q alice && [ -f /etc/mlcc/mlccd.toml ] && [ -f /etc/mlcc/switchd.toml ]"

printf '{"test": "guide", "suite": "%s", "root": "%s", "test_s": %.1f}\n' "$suite" "$root_s" \
  "$(awk "BEGIN{print $(date +%s.%N)-$start_s}")"
echo "test-guide: all checks passed"
