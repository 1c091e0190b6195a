#!/usr/bin/env bash
# zcnic-lab: zcnet's NIC suite (scripts/hw-suite.sh) run for real against the software NIC
# (kmod/zcnic) inside the kernel lab's guest.
#
#   scripts/zcnic-lab.sh [--kernel 7.2|6.18] [--timeout SECONDS] [--bytes N] [--json] [--only TEST,...]
#   scripts/zcnic-lab.sh --measure ROUNDS [--bytes N] [--json]
#
# --measure runs, instead of the suite, the CPU-per-byte comparison of copy receive, zcrx and
# devmem TCP over the pair (scripts/lib/zcnic-measure.sh: ROUNDS interleaved rounds of --bytes,
# default 64M, the bytes counted but not pattern-checked; the guest's total CPU per GB and its ratio
# to copy). Software
# NIC figures under QEMU TCG, never NIC figures: the device's copy runs on a CPU.
#
# Builds the module for the guest's kernel (scripts/kmod-build.sh), boots that kernel
# (scripts/kernel-lab.sh), and there: loads zcnic (one pair, 4 queues), moves zcnic1 into a
# network namespace, gives the pair 192.168.77.1/24 (zcnic0) and 192.168.77.2/24 (zcnic1, in the
# namespace), runs hw-suite.sh with ZCNET_HW_IFACE=zcnic0, the namespace as the peer and udmabuf
# memory for the devmem tests, 32 reserved 2 MiB huge pages for zcrx areas, prints its table (or JSON), then unloads the module: a module that
# cannot be unloaded, or a namespace or NIC state left behind, fails the run. The guest has no
# other network: nothing leaves it. zcnet is the debug build (cargo build -p zcnet-cli) unless
# ZCNET names another. The bindings' tests (lib-*, c-*, py-*: scripts/lib/hw-suite-bindings.sh)
# run the library's example, the C ABI and the Python extension, which this script builds here
# (debug: cargo build -p zcnet --example nic_recv -p zcnet-ffi -p zcnet-py) when they are
# selected, and copies for the guest. See docs/design.md, "Software NIC (kmod/zcnic)".
#
# Exit status: 0 every suite test passed or skipped with a reason; 1 one failed, or the module
# could not be loaded or unloaded cleanly; 2 bad arguments or a missing tool (one line says
# which); 3 Debian's archive could not be reached for the kernel or its headers.
set -uo pipefail
me='zcnic-lab'
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "$me: $*" >&2; exit 2; }

# ---- inside the guest: load, wire, run the suite, unload ----
if [ "${1:-}" = --in-guest ]; then
  ko=$2 bytes=$3 json=$4 only=$5 measure=${6:-}
  ns=zcnic-peer
  busybox=$(command -v busybox) || { echo "$me: no busybox in the guest (insmod/rmmod)" >&2; exit 1; }
  if ! "$busybox" insmod "$ko" queues=4 pairs=1; then
    echo "$me: insmod $ko failed (dmesg: $(dmesg | tail -n 3 | tr '\n' ' '))" >&2
    exit 1
  fi
  status=0
  # Reserved 2 MiB huge pages for zcrx areas with buffers larger than a page (hw-suite's
  # zcrx-bufsize: a 16 MiB area); 64 MiB of the guest's memory.
  echo 32 >/proc/sys/vm/nr_hugepages 2>/dev/null
  ip netns add "$ns" &&
    ip link set zcnic1 netns "$ns" &&
    ip addr add 192.168.77.1/24 dev zcnic0 &&
    ip link set zcnic0 up &&
    ip -n "$ns" addr add 192.168.77.2/24 dev zcnic1 &&
    ip -n "$ns" link set zcnic1 up &&
    ip -n "$ns" link set lo up || { echo "$me: wiring the pair failed" >&2; status=1; }
  if [ "$status" = 0 ] && [ -n "$measure" ]; then
    # --measure: the CPU-per-byte comparison instead of the suite.
    ZCNET=${ZCNET:-zcnet} IFACE=zcnic0 LOCAL_V4=192.168.77.1 PEER_NS=$ns BYTES=$bytes \
      ROUNDS=$measure JSON=$json bash "$ROOT/scripts/lib/zcnic-measure.sh"
    status=$?
  elif [ "$status" = 0 ]; then
    args=(--logs /tmp/zcnic-lab-logs)
    [ "$json" = 1 ] && args+=(--json)
    [ -n "$only" ] && args+=(--only "$only")
    ZCNET_HW_IFACE=zcnic0 ZCNET_HW_LOCAL_V4=192.168.77.1 ZCNET_HW_REMOTE_V4=192.168.77.2 \
      ZCNET_HW_REMOTE_NETNS=$ns ZCNET_HW_MEM=udmabuf ZCNET_HW_BYTES=$bytes \
      bash "$ROOT/scripts/hw-suite.sh" "${args[@]}"
    status=$?
    # The guest's /tmp goes with it: what the failed tests' commands printed, on stderr.
    if [ "$status" != 0 ]; then
      for f in /tmp/zcnic-lab-logs/*/*.out /tmp/zcnic-lab-logs/*/*.err; do
        [ -s "$f" ] || continue
        echo "$me: ---- ${f#/tmp/zcnic-lab-logs/} (last lines)" >&2
        tail -n 4 "$f" | cut -c1-400 >&2
      done
    fi
  fi
  ip netns del "$ns" 2>/dev/null
  # The module goes with every binding the suite may have left: the kernel unbinds providers
  # when the devices unregister. A module still in use after that is a leak.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    "$busybox" rmmod zcnic 2>/dev/null && break
    sleep 1
  done
  if [ -e /sys/module/zcnic ]; then
    echo "$me: rmmod zcnic failed: the module is still in use after the suite (refcnt $(cat /sys/module/zcnic/refcnt 2>/dev/null))" >&2
    status=1
  fi
  if dmesg | grep -E -q 'BUG:|WARNING:|Oops|leak'; then
    echo "$me: the guest's kernel log has a BUG, WARNING, Oops or leak:" >&2
    dmesg | grep -E -B2 -A12 'BUG:|WARNING:|Oops|leak' | head -n 60 >&2
    status=1
  fi
  exit "$status"
fi

# ---- on the host ----
kernel=7.2 timeout_s=3000 bytes= json=0 only= measure=
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) [ $# -ge 2 ] || die "--kernel wants 7.2 or 6.18"; kernel=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || die "--timeout wants seconds"; timeout_s=$2; shift 2 ;;
    --bytes) [ $# -ge 2 ] || die "--bytes wants a size like 8M"; bytes=$2; shift 2 ;;
    --json) json=1; shift ;;
    --only) [ $# -ge 2 ] || die "--only wants a comma-separated list of hw-suite tests"; only=$2; shift 2 ;;
    --measure) [ $# -ge 2 ] || die "--measure wants a number of rounds, like 3"; measure=$2; shift 2 ;;
    -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) die "unknown argument '$1': usage: $0 [--kernel 7.2|6.18] [--timeout S] [--bytes N] [--json] [--only TEST,... | --measure ROUNDS]" ;;
  esac
done
[[ $timeout_s =~ ^[0-9]+$ && $timeout_s -gt 0 ]] || die "--timeout wants whole seconds > 0, not '$timeout_s'"
[ -n "$bytes" ] || bytes=$([ -n "$measure" ] && echo 64M || echo 8M)
[[ $bytes =~ ^[0-9]+[kKmMgG]?$ ]] || die "--bytes wants a size like 8M, not '$bytes'"
[ -z "$measure" ] || [[ $measure =~ ^[1-9][0-9]*$ ]] || die "--measure wants a number of rounds of at least 1, not '$measure'"
[ -z "$measure" ] || [ -z "$only" ] || die "--measure runs the CPU-per-byte comparison, not suite tests: drop --only"
case $PWD/ in /run/* | /dev/shm/*) die "run it from a directory the guest sees (not under /run or /dev/shm)" ;; esac

ko=$(bash "$ROOT/scripts/kmod-build.sh" --kernel "$kernel" -q)
rc=$?
[ "$rc" = 0 ] || exit "$rc"
zcnet=${ZCNET:-$ROOT/target/debug/zcnet}
[ -x "$zcnet" ] || die "no zcnet at $zcnet: build it with 'cargo build -p zcnet-cli', or set ZCNET"
# A copy that no concurrent cargo build replaces while the guest reads it over 9p.
copy=$ROOT/target/zcnic-lab/zcnet-$$
mkdir -p "$(dirname "$copy")" && cp "$zcnet" "$copy" || die "cannot copy $zcnet to $copy"
# The bindings' programs, built and copied the same way (ZCNET_HW_BINDINGS in the guest).
bindings=$ROOT/target/zcnic-lab/bindings-$$
trap 'rm -f "$copy"; rm -rf "$bindings"' EXIT
if [ -z "$measure" ] && { [ -z "$only" ] || [[ ,$only, =~ ,(lib|c|py)- ]]; }; then
  # Two builds: a target flag (--example) given with several packages limits every one of them
  # to that target, and the C ABI's and Python's libraries would not be built.
  (cd "$ROOT" && cargo build -q -p zcnet --example nic_recv && cargo build -q -p zcnet-ffi -p zcnet-py) || {
    echo "$me: building the bindings' programs failed (cargo build -p zcnet --example nic_recv -p zcnet-ffi -p zcnet-py)" >&2
    exit 1
  }
  mkdir -p "$bindings/examples" &&
    cp "$ROOT/target/debug/examples/nic_recv" "$bindings/examples/" &&
    cp "$ROOT/target/debug/libzcnet_ffi.so" "$ROOT/target/debug/lib_zcnet.so" "$bindings/" ||
    die "cannot copy the bindings' programs to $bindings"
else
  bindings=
fi
# A guest whose kernel died part-way (exit 125: seen under TCG, an oops at a NOP in code the
# tests do not reach) is booted once more; the suite then runs from the start.
for attempt in 1 2; do
  ZCNET=$copy ZCNET_HW_BINDINGS=$bindings bash "$ROOT/scripts/kernel-lab.sh" --kernel "$kernel" --timeout "$timeout_s" -q -- \
    bash "$ROOT/scripts/zcnic-lab.sh" --in-guest "$ko" "$bytes" "$json" "$only" "$measure"
  rc=$?
  [ "$rc" = 125 ] && [ "$attempt" = 1 ] || exit "$rc"
  echo "$me: the guest died before the suite ended (exit 125): running it once more" >&2
done
