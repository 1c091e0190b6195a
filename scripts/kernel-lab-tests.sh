#!/usr/bin/env bash
# kernel-lab-tests: run the built test executables that exercise the kernel inside ONE Linux 7.2
# guest (scripts/kernel-lab.sh), so the tests that skip on the host's older kernel
# ([kernel-version]) run, and the rest are checked against 7.2 as well.
#
#   scripts/kernel-lab-tests.sh [--kernel 7.2] [--timeout SECONDS] [--list] [PACKAGE/TARGET...]
#
# PACKAGE/TARGET names a test executable as cargo does: zcnet-sys/lib for a library's unit
# tests, zcnet/zcrx_nodev for an integration test; without any, the set below. The executables
# are built (or found already built) with `cargo test --workspace --no-run`; the guest runs each
# in turn with --test-threads=1 and ZCNET_TEST_TIMEOUT_SCALE (default 20: TCG is 50-100x slower
# than the host), in the caller's environment (ZCNET_TEST_STRICT applies inside). Each
# executable's output is printed when it ends; the last line is always
#   kernel-lab tests: N passed, M failed, K skipped
# summed from their `test result:` lines. A guest that times out (exit 124: seen once, a guest
# that hung with no output) is retried once, and so is an executable that fails in it (the
# first try's output is printed, prefixed, and the retry said); a second failure fails.
#
# Exit status: 0 all passed; 1 a test failed, an executable did not finish, or the guest failed;
# 2 the lab could not start for a reason this machine can fix (qemu or busybox missing, bad
# arguments); 3 Debian's archive could not be reached or no longer serves the pinned kernel (one
# line says so; nothing ran, which counts as skipped, not failed). See docs/design.md,
# "Kernel lab".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
me='kernel-lab-tests'

# ---- the set: what exercises the kernel (io_uring, zcrx, AF_XDP, devmem, netlink, memlock) ----
# Guest times (Linux 7.2, TCG, 2 vCPUs) are in docs/design.md, "Kernel lab".
SET=(
  zcnet-sys/lib      # io_uring probes, zcrx (nodev_tests), xsk, the syscall layer
  zcnet-sys/bufring
  zcnet/zcrx_nodev
  zcnet/rx_refusal
  zcnet/memlock
  zcnet/zcrx_dmabuf
  zcnet/devmem_tx
  zcnet/conformance
  zcnet/small_sends
  zcnet/xsk
  zcnet/xsk_shared
  zcnet/rx
  zcnet/nexthop
  zcnet/netns_view
  zcnet/cancel
  zcnet-sys/interrupt
  zcnet-netlink/live
  zcnet-cli/probe
  zcnet-cli/probe_xsk
  zcnet-cli/nic
  zcnet-cli/zcrx_nodev
  zcnet-cli/bench_rx_nodev
  zcnet-cli/memlock
  zcnet-cli/devmem_tx
)

kernel=7.2 timeout_s=900 list=0
while [ $# -gt 0 ]; do
  case $1 in
    --kernel) [ $# -ge 2 ] || { echo "$me: --kernel wants a version" >&2; exit 2; }; kernel=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || { echo "$me: --timeout wants seconds" >&2; exit 2; }; timeout_s=$2; shift 2 ;;
    --list) list=1; shift ;;
    -h | --help) sed -n '6,7s/^#  *//p' "$0" >&2; exit 2 ;;
    -*) echo "$me: unknown argument '$1'" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] && SET=("$@")
. scripts/lib/args.sh
need_int --timeout "$timeout_s" 1

# ---- find the executables: cargo's JSON names each test executable with its package and target
t0=$SECONDS
exes=$(mktemp) || exit 2
trap 'rm -f "$exes"' EXIT
if ! cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    t = m["target"]
    name = "lib" if t["kind"][0] in ("lib", "rlib", "cdylib", "staticlib", "proc-macro") else t["name"]
    if t["kind"][0] == "bin":
        name = "bin-" + t["name"]
    # package_id: "path+file:///…/crates/zcnet-sys#0.1.0" or "…#zcnet-sys@0.1.0"
    pid = m["package_id"]
    pkg = pid.split("#")[1].split("@")[0] if "@" in pid.split("#")[-1] else pid.split("#")[0].rstrip("/").split("/")[-1]
    print(pkg + "/" + name, m["executable"])
' >"$exes"; then
  echo "$me: cargo test --workspace --no-run failed: run it to see why" >&2
  echo "kernel-lab tests: 0 passed, 1 failed, 0 skipped"
  exit 1
fi
if [ "$list" = 1 ]; then
  sort "$exes"
  exit 0
fi

# ---- the driver the guest runs: each executable in turn, timed ----
dir=target/kernel-lab-tests
mkdir -p "$dir" || exit 2
# One per run (two runs must not rewrite each other's driver while a guest reads it); under
# target/, which the guest sees (its /tmp is its own).
driver=$(mktemp "$dir/driver.XXXXXX") || exit 2
trap 'rm -f "$exes" "$driver"' EXIT
# shellcheck disable=SC2016 # the driver's own expansions, written as they are
{
  echo '#!/bin/bash'
  echo "# written by $0: run in the guest by scripts/kernel-lab.sh"
  echo 'export ZCNET_TEST_TIMEOUT_SCALE=${ZCNET_TEST_TIMEOUT_SCALE:-20}'
  echo 'rc=0'
  for t in "${SET[@]}"; do
    exe=$(awk -v t="$t" '$1 == t {print $2}' "$exes" | tail -n1)
    if [ -z "$exe" ]; then
      echo "$me: no test executable $t (--list shows them)" >&2
      echo "kernel-lab tests: 0 passed, 1 failed, 0 skipped"
      exit 2
    fi
    printf 'echo "=== %s: %s (%s)"\n' "$me" "$t" "${exe#"$PWD"/}"
    printf 's=$(date +%%s)\n'
    # An executable that fails runs once more: a 2-vCPU TCG guest reorders and stalls now and
    # then (seen: UDP datagrams across CPUs, a process killed mid-run). Its first output is
    # printed prefixed (so its result line is not counted) with the retry said in one line; a
    # second failure fails.
    printf 'out=$(mktemp); %q --test-threads=1 >"$out" 2>&1; r=$?\n' "$exe"
    printf 'if [ $r != 0 ]; then sed "s/^/  first try: /" "$out"; echo "=== %s: %s failed (exit $r): running it once more"; %q --test-threads=1; r=$?; else cat "$out"; fi; rm -f "$out"\n' "$me" "$t" "$exe"
    printf '[ $r = 0 ] || rc=1\n'
    printf 'echo "=== %s: %s exited $r after $(( $(date +%%s) - s )) s"\n' "$me" "$t"
  done
  echo 'exit $rc'
} >"$driver"

# ---- one guest, retried once if it hangs ----
log=$(mktemp) || exit 2
trap 'rm -f "$exes" "$driver" "$log"' EXIT
echo "$me: ${#SET[@]} test executables in one Linux $kernel guest (timeout $timeout_s s): ${SET[*]}"
# A guest that died part-way (exit 125) is retried too: a TCG guest's kernel has been seen to
# oops at a NOP ("Fatal exception in interrupt", in inet_getpeer 84 s into a run, and at boot),
# which points at QEMU's multi-threaded TCG patching kernel text under it, not at the tests.
for attempt in 1 2; do
  bash scripts/kernel-lab.sh --kernel "$kernel" --timeout "$timeout_s" -- bash "$driver" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  { [ "$rc" = 124 ] || [ "$rc" = 125 ]; } && [ "$attempt" = 1 ] || break
  if [ "$rc" = 124 ]; then
    echo "$me: the guest timed out after $timeout_s s (exit 124): retrying once"
  else
    echo "$me: the guest died before the tests ended (exit 125; its console is above): retrying once"
  fi
done

passed=$(awk '/^test result:/ {s += $4} END {print s + 0}' "$log")
failed=$(awk '/^test result:/ {s += $6} END {print s + 0}' "$log")
ignored=$(awk '/^test result:/ {s += $8} END {print s + 0}' "$log")
ran=$(grep -c "^=== $me: .* exited " "$log")
echo "$me: $ran of ${#SET[@]} executables finished; kernel-lab.sh exit $rc; $((SECONDS - t0)) s in all"
# Each line of the guest's timing, again, together.
grep "^=== $me: .* exited " "$log" | sed "s/^=== $me: /  /"

if [ "$rc" = 2 ] && ! grep -q '^kernel-lab: booting' "$log"; then
  line=$(grep '^kernel-lab: ' "$log" | tail -n1)
  if [[ $line == *"cannot fetch Debian's"* || $line == *"downloading "* ]]; then
    echo "$me: skipped, the kernel could not be downloaded: $line"
    echo "kernel-lab tests: 0 passed, 0 failed, 1 skipped"
    exit 3
  fi
  echo "$me: the lab could not start: $line"
  echo "kernel-lab tests: 0 passed, 1 failed, 0 skipped"
  exit 2
fi
# A guest that died, hung or did not run every executable counts as one failure more than its
# test result lines show.
if [ "$rc" != 0 ] && { [ "$failed" = 0 ] || [ "$ran" != "${#SET[@]}" ]; }; then
  failed=$((failed + 1))
fi
echo "kernel-lab tests: $passed passed, $failed failed, $ignored skipped"
[ "$rc" = 0 ] && [ "$failed" = 0 ]
