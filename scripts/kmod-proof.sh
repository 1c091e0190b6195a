#!/usr/bin/env bash
# kmod-proof: prove the software NIC (kmod/zcnic) with tools nobody here wrote, inside the kernel lab.
#
#   scripts/kmod-proof.sh [--kernel 7.2|6.18] [--timeout S] [-q] [STEP...]
#
# Builds the module (scripts/kmod-build.sh), builds the kernel's own ncdevmem
# (tools/testing/selftests/drivers/net/hw/ncdevmem.c with tools/net/ynl's C library, from Debian's
# linux-source-7.2 and 7.2's linux-libc-dev) and liburing's examples/zcrx (from Debian's liburing
# source package) — downloads cached under $ZCNET_KERNEL_LAB_CACHE like the kernels, binaries under
# target/kmod-tools/ — then boots the lab's guest (scripts/kernel-lab.sh) and runs
# kmod/tools/zcnic-proof-guest.sh there: TCP through the pair, ncdevmem's own bind checks, devmem RX
# into a udmabuf and devmem TX from one, io_uring zcrx on a queue, each tool checking the bytes, and
# a clean unload, also with bindings held. STEPs pick some of: smoke ncdevmem-checks ncdevmem-rx
# ncdevmem-hds ncdevmem-tx zcrx unload-held.
# Everything comes from Debian's archive (deb.debian.org), so it runs where only package
# registries are reachable. See docs/design.md, "Software NIC (kmod/zcnic)".
#
# Exit status: the guest script's (0 all passed, 1 a step failed); 2 bad usage or a missing tool;
# 3 Debian's archive could not be reached; 4 a tool did not build; 124/125 from the kernel lab
# (timeout, guest died). Failures print one line `kmod-proof: ...` naming the cause and the fix.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/lib/apt.sh"
MIRROR=${ZCNET_KERNEL_LAB_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
# The kernel tree ncdevmem and its ynl library come from: 7.2's, as the lab's 7.2 guest runs.
LINUX_SRC_PKG=linux-source-7.2 LINUX_SRC_VER=7.2.13-1
me='kmod-proof'
die() {
  local rc=$1
  shift
  echo "$me: $*" >&2
  exit "$rc"
}
say() { [ "$quiet" = 1 ] || echo "$me: $*" >&2; }

kernel=7.2 timeout_s=1500 quiet=0
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) [ $# -ge 2 ] || die 2 "--kernel wants a value"; kernel=$2; shift 2 ;;
    --kernel=*) kernel=${1#*=}; shift ;;
    --timeout) [ $# -ge 2 ] || die 2 "--timeout wants seconds"; timeout_s=$2; shift 2 ;;
    -q | --quiet) quiet=1; shift ;;
    -h | --help) sed -n '4,4s/^#  *//p' "$0" >&2; exit 2 ;;
    -*) die 2 "unknown option '$1': usage: $0 [--kernel 7.2|6.18] [--timeout S] [-q] [STEP...]" ;;
    *) break ;;
  esac
done
# Checked here, before the module is built and the sources fetched (kernel-lab.sh checks the
# same, but only after that work).
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -gt 0 ]] || die 2 "--timeout wants whole seconds > 0, not '$timeout_s'"
for s in "$@"; do
  case $s in
    smoke | ncdevmem-checks | ncdevmem-rx | ncdevmem-hds | ncdevmem-tx | zcrx | unload-held) ;;
    *) die 2 "unknown step '$s': steps are smoke ncdevmem-checks ncdevmem-rx ncdevmem-hds ncdevmem-tx zcrx unload-held" ;;
  esac
done

for t in apt-get dpkg-deb dpkg-source flock make gcc tar xz python3; do
  command -v $t >/dev/null 2>&1 || die 2 "$t not found: apt-get install dpkg-dev make gcc xz-utils python3"
done
command -v ethtool >/dev/null 2>&1 ||
  die 2 "ethtool not found: ncdevmem and the zcrx step call it for RSS and ntuple rules (apt-get install ethtool)"

# ---- the module ----
qflag=()
[ "$quiet" = 1 ] && qflag=(-q)
ko=$("$ROOT/scripts/kmod-build.sh" --kernel "$kernel" "${qflag[@]}")
rc=$?
[ $rc = 0 ] || exit $rc

# ---- sources from Debian, cached beside the kernels ----
cache=${ZCNET_KERNEL_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zcnet-kernel-lab}
src=$cache/kmod/src
tools=$ROOT/target/kmod-tools
mkdir -p "$src" "$tools" || die 2 "cannot write $src or $tools"
exec 9>"$cache/lock" || die 2 "cannot write $cache/lock: set ZCNET_KERNEL_LAB_CACHE to a writable directory"

apt_sid() { # a private apt for sid with sources (like scripts/kernel-lab.sh)
  apt=$src/apt
  apt_private "$apt" "deb [signed-by=$KEYRING] $MIRROR sid main" "deb-src [signed-by=$KEYRING] $MIRROR sid main" ||
    die 2 "cannot write $src"
  log=$apt/apt.log
  APT_CONFIG=$apt/apt.conf apt-get -q update >"$log" 2>&1
  compgen -G "$apt/lists/*_Packages*" >/dev/null ||
    die 3 "cannot fetch Debian's sid index from $MIRROR ($(grep -m1 -A1 -E '^Err:' "$log" | tail -n1 | cut -c1-120)): check the network, or set ZCNET_KERNEL_LAB_MIRROR"
}

ver=${LINUX_SRC_VER%-*}
ksrc=$src/linux-$ver
ncdevmem=$tools/ncdevmem-$ver
if [ ! -x "$ncdevmem" ]; then
  flock 9
  if [ ! -e "$ksrc/.complete" ]; then
    say "downloading $LINUX_SRC_PKG=$LINUX_SRC_VER and linux-libc-dev=$LINUX_SRC_VER (sid) for ncdevmem"
    apt_sid
    (cd "$apt/archives" && APT_CONFIG=$apt/apt.conf apt-get -q download \
      "$LINUX_SRC_PKG=$LINUX_SRC_VER" "linux-libc-dev=$LINUX_SRC_VER") >>"$log" 2>&1 ||
      die 3 "downloading $LINUX_SRC_PKG=$LINUX_SRC_VER from $MIRROR sid failed: if sid moved on, bump LINUX_SRC_VER in $0 with the kernel pins; log: $log"
    rm -rf "$ksrc"
    mkdir -p "$ksrc/deb" "$ksrc/uapi"
    dpkg-deb -x "$apt"/archives/linux-libc-dev_*.deb "$ksrc/uapi" || die 3 "unpacking linux-libc-dev failed"
    dpkg-deb --fsys-tarfile "$apt"/archives/${LINUX_SRC_PKG}_*.deb |
      tar -x -C "$ksrc/deb" --wildcards '*/linux-source-*.tar.xz' || die 3 "unpacking $LINUX_SRC_PKG failed"
    # Only what ncdevmem needs: the ynl library, its generator and specs, the raw uapi
    # headers the generated code is built against (Makefile.deps), the test.
    tar -x -C "$ksrc" --strip-components=1 -f "$ksrc"/deb/usr/src/linux-source-*.tar.xz \
      --wildcards '*/tools/net/ynl/*' '*/tools/scripts/*' '*/Documentation/netlink/*' \
      '*/include/uapi/*' '*/tools/testing/selftests/drivers/net/hw/ncdevmem.c' ||
      die 3 "extracting the kernel tree failed"
    # ynl_gen_c.py climbs from the spec to the directory holding MAINTAINERS (the tree's
    # root) and loops forever without one.
    touch "$ksrc/MAINTAINERS"
    rm -rf "$ksrc/deb" "$apt"
    touch "$ksrc/.complete"
  fi
  say "building ncdevmem from Linux $ver (tools/net/ynl's generator takes a few minutes)"
  inc=$ksrc/uapi/usr/include
  if ! make -C "$ksrc/tools/net/ynl" -j2 GENS="ethtool netdev" RSTS="" libynl.a >"$tools/ynl.log" 2>&1; then
    tail -n 15 "$tools/ynl.log" >&2
    die 4 "building tools/net/ynl's libynl.a failed (log: $tools/ynl.log; its generator needs python3 with yaml: apt-get install python3-yaml)"
  fi
  y=$ksrc/tools/net/ynl
  if ! gcc -O2 -I"$inc" -I"$inc/x86_64-linux-gnu" -I"$y/lib" -I"$y/generated" \
    "$ksrc/tools/testing/selftests/drivers/net/hw/ncdevmem.c" "$y/libynl.a" -o "$ncdevmem.tmp" \
    >"$tools/ncdevmem.log" 2>&1; then
    tail -n 15 "$tools/ncdevmem.log" >&2
    die 4 "compiling ncdevmem failed (log: $tools/ncdevmem.log)"
  fi
  mv "$ncdevmem.tmp" "$ncdevmem"
  flock -u 9
fi

zcrx=$(ls "$tools"/zcrx-* 2>/dev/null | head -n1)
if [ -z "$zcrx" ]; then
  flock 9
  lsrc=$(ls -d "$src"/liburing-*/ 2>/dev/null | head -n1)
  if [ -z "$lsrc" ] || [ ! -e "$lsrc/.complete" ]; then
    say "downloading liburing's source package (sid) for examples/zcrx"
    apt_sid
    rm -rf "$src"/liburing-*
    (cd "$src" && APT_CONFIG=$apt/apt.conf apt-get -q source --download-only liburing) >>"$log" 2>&1 ||
      die 3 "downloading liburing's source from $MIRROR sid failed; log: $log"
    (cd "$src" && dpkg-source --no-check -x liburing_*.dsc) >>"$log" 2>&1 ||
      die 3 "unpacking liburing's source failed (dpkg-source); log: $log"
    rm -f "$src"/liburing_*
    rm -rf "$apt"
    lsrc=$(ls -d "$src"/liburing-*/ | head -n1)
    touch "$lsrc/.complete"
  fi
  lsrc=${lsrc%/}
  lver=${lsrc##*/liburing-}
  say "building liburing $lver and examples/zcrx"
  if ! (cd "$lsrc" && ./configure --cc=gcc >"$tools/liburing.log" 2>&1 &&
    make -C src -j2 liburing.a >>"$tools/liburing.log" 2>&1 &&
    gcc -O2 -Wall -D_GNU_SOURCE -Isrc/include examples/zcrx.c examples/helpers.c src/liburing.a \
      -o "$tools/zcrx-$lver" >>"$tools/liburing.log" 2>&1); then
    tail -n 15 "$tools/liburing.log" >&2
    die 4 "building liburing's examples/zcrx failed (log: $tools/liburing.log)"
  fi
  zcrx=$tools/zcrx-$lver
  flock -u 9
fi

# ---- the guest ----
say "proving ${ko#"$ROOT"/} in the $kernel guest with ${ncdevmem#"$ROOT"/} and ${zcrx#"$ROOT"/}"
cd "$ROOT" || exit 2
# A guest whose kernel died part-way (exit 125: seen under TCG, an oops at a NOP) is booted once
# more; the proof then runs from the start.
for attempt in 1 2; do
  "$ROOT/scripts/kernel-lab.sh" --kernel "$kernel" --timeout "$timeout_s" "${qflag[@]}" -- \
    kmod/tools/zcnic-proof-guest.sh "${ko#"$ROOT"/}" "${ncdevmem#"$ROOT"/}" "${zcrx#"$ROOT"/}" "$@"
  rc=$?
  [ "$rc" = 125 ] && [ "$attempt" = 1 ] || exit "$rc"
  echo "kmod-proof: the guest died before the proof ended (exit 125): running it once more" >&2
done
