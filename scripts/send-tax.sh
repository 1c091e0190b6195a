#!/usr/bin/env bash
# zcnet's "library tax" on the send side: zcnet's UDP senders against peers with no library
# around them, on one path and one CPU, rounds interleaved.
#
#   liburing examples/send-zerocopy -z 1 -b 1  (SEND_ZC, fixed buffer)  vs  zcnet send --tx uring-zc
#   liburing examples/send-zerocopy -z 0       (IORING_OP_SEND)         vs  zcnet send --tx uring
#   zcnet bench raw --loop msg-zerocopy        (minimal MSG_ZEROCOPY)   vs  zcnet send --tx msg-zerocopy
#
# zcnet sends from its default memory (`--mem auto`: 4 KiB pages, but transparent huge pages for
# msg-zerocopy); the peers from 4 KiB pages. Optional cases: zcnet-uring-zc-host,
# zcnet-uring-host, zcnet-msg-zerocopy-host (`--mem host`, 4 KiB pages) against the peers as they
# are, and liburing-zc-huge (send-zerocopy -l 1: reserved 2 MiB pages; reserve one first with
# 'echo 1 > /proc/sys/vm/nr_hugepages') against zcnet-uring-zc; and raw-send-zc, zcnet's raw
# SEND_ZC loop (`bench raw --loop send-zc`: the uring-zc backend's kernel-facing choices, no
# library), with any of its flags appended by '+' to take the example's choice instead:
# raw-send-zc+no-report-usage+one-buffer+ring-fd+single-issuer is the example's set; and
# raw-send, the same loop of IORING_OP_SEND (`bench raw --loop send`: the uring backend's
# choices; raw-send+one-buffer+ring-fd+single-issuer the example's -z 0). Those split the tax
# into what zcnet's choices cost the kernel and what its library costs in user space.
#
# The path: a private namespace whose route to 10.61.0.0/24 ends in an ifb device with MTU 65535
# that drops every packet (the device is created inside the namespace: the root namespace and its
# boot-time interfaces are never touched). Every sender runs in it, pinned to CPU $CPU, with
# $SIZE-byte datagrams and $INFLIGHT requests in flight.
#
# Usage (root): scripts/send-tax.sh
# Environment: LIBURING (a liburing source tree with examples/send-zerocopy built; unset: the
#   script fetches Debian's liburing source package (sid) once into target/send-tax/liburing and
#   builds the example there: it needs apt-get, dpkg-source, make and cc, i.e. `apt-get install
#   dpkg-dev build-essential`, and SEND_TAX_MIRROR names another Debian mirror than
#   deb.debian.org), ZCNET (default target/release/zcnet), ROUNDS (3), SECS (3), CPU (1),
#   SIZE (64000), INFLIGHT (8), CASES (space-separated subset of the case names below).
# Prints each round's GB/s (10^9 B/s) per case (each round runs the cases in the order of
# CASES rotated by one more place), then the medians and the ratios zcnet/peer.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ZCNET=${ZCNET:-target/release/zcnet}
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-3}
CPU=${CPU:-1}
SIZE=${SIZE:-64000}
INFLIGHT=${INFLIGHT:-8}
CASES=${CASES:-"liburing-zc zcnet-uring-zc liburing-send zcnet-uring raw-msg-zerocopy zcnet-msg-zerocopy"}
# Every setting checked before anything is fetched, built or made (exit 2, one line).
me=send-tax
. "$ROOT/scripts/lib/args.sh"
. "$ROOT/scripts/lib/apt.sh"
[[ $# -eq 0 ]] || { echo "$me: takes no arguments (its settings are environment variables: see the top of $0)" >&2; exit 2; }
need_int ROUNDS "$ROUNDS" 1 1000
need_seconds SECS "$SECS"
need_int CPU "$CPU" 0 $(($(nproc) - 1))
need_int SIZE "$SIZE" 1 65507
need_int INFLIGHT "$INFLIGHT" 1 4096
[[ -n ${CASES// /} ]] || { echo "$me: CASES is empty: name at least one case" >&2; exit 2; }
for c in $CASES; do
    case $c in
        liburing-zc | liburing-send | liburing-zc-huge | zcnet-uring-zc | zcnet-uring | zcnet-msg-zerocopy | \
            raw-msg-zerocopy | zcnet-*-host | raw-send-zc* | raw-send | raw-send+*) ;;
        *) echo "$me: CASES: no case named '$c' (the cases are listed at the top of $0)" >&2; exit 2 ;;
    esac
done

if [[ -n ${LIBURING:-} ]]; then
    PEER="$LIBURING/examples/send-zerocopy"
    if [[ ! -x $PEER ]]; then
        echo "send-tax: no $PEER: build liburing's examples there (./configure && make -C src && make -C examples), or leave LIBURING unset to have Debian's liburing fetched and built into target/send-tax" >&2
        exit 2
    fi
fi
if [[ ! -x $ZCNET ]]; then
    echo "send-tax: no $ZCNET: cargo build --release -p zcnet-cli, or set ZCNET" >&2
    exit 2
fi
if [[ $(id -u) != 0 ]]; then
    echo "send-tax: needs root (a network namespace with an ifb device)" >&2
    exit 2
fi

# liburing's send-zerocopy example, when LIBURING names none: Debian's liburing source package
# from sid (the newest liburing Debian has), unpacked with Debian's patches and only that example
# built, once, into target/send-tax/liburing. A private apt (its own sources, lists and cache, as
# scripts/kernel-lab.sh uses for the kernels): the system's /etc/apt is not read or touched.
fetch_liburing() {
    local dir=$1 keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    local mirror=${SEND_TAX_MIRROR:-http://deb.debian.org/debian}
    local work apt dsc t
    die() { echo "send-tax: $*" >&2; exit 2; }
    for t in apt-get dpkg-source make cc; do
        command -v "$t" >/dev/null 2>&1 ||
            die "$t not found: it builds liburing's send-zerocopy example from Debian's source package (apt-get install dpkg-dev build-essential), or set LIBURING to a liburing tree with its examples built"
    done
    [[ -r $keyring ]] || die "$keyring not found: apt-get install debian-archive-keyring, or set LIBURING"
    work="$(dirname "$dir")/work.$$"
    apt=$work/apt
    rm -rf "$work"
    mkdir -p "$work/src" || die "cannot write $work"
    apt_private "$apt" "deb-src [signed-by=$keyring] $mirror sid main" || die "cannot write $work"
    echo "send-tax: no LIBURING: fetching Debian's liburing source (sid, $mirror) into $dir" >&2
    # apt-get update exits 0 when the archive cannot be reached (it only warns): the index it
    # leaves behind is what tells.
    APT_CONFIG=$apt/apt.conf apt-get -q update >"$work/fetch.log" 2>&1 || true
    compgen -G "$apt/lists/*_Sources*" >/dev/null ||
        die "cannot fetch Debian's sid source index from $mirror (log: $work/fetch.log): check the network, set SEND_TAX_MIRROR to a reachable Debian mirror, or set LIBURING"
    (cd "$work/src" && APT_CONFIG=$apt/apt.conf apt-get -q source --download-only liburing) \
        >>"$work/fetch.log" 2>&1 || die "downloading liburing's source package failed (log: $work/fetch.log)"
    dsc=$(compgen -G "$work/src/liburing_*.dsc" | head -n1)
    [[ -n $dsc ]] || die "no liburing .dsc in $work/src (log: $work/fetch.log)"
    dpkg-source -x "$dsc" "$work/liburing" >>"$work/fetch.log" 2>&1 ||
        die "unpacking $dsc failed (log: $work/fetch.log)"
    (cd "$work/liburing" && ./configure && make -C src && make -C examples send-zerocopy) \
        >"$work/build.log" 2>&1 || die "building liburing's send-zerocopy failed (log: $work/build.log)"
    basename "$dsc" .dsc | sed 's/^liburing_/Debian liburing /' >"$work/liburing/.send-tax-source"
    rm -rf "$dir"
    mv "$work/liburing" "$dir"
    rm -rf "$work"
}
if [[ -z ${LIBURING:-} ]]; then
    LIBURING=$ROOT/target/send-tax/liburing
    PEER="$LIBURING/examples/send-zerocopy"
    [[ -x $PEER ]] || fetch_liburing "$LIBURING"
    [[ -x $PEER ]] || { echo "send-tax: no $PEER after building it" >&2; exit 2; }
fi

NS="zcnet-tax-$$"
DEST=10.61.0.2
PORT=9
cleanup() { ip netns del "$NS" 2>/dev/null || true; }
trap cleanup EXIT
# ifb loaded by its first use would make its default devices (ifb0, ifb1) in the root
# namespace: load it with none first.
[ -d /sys/module/ifb ] || modprobe ifb numifbs=0 2>/dev/null || true
ip netns add "$NS"
ip -n "$NS" link set lo up
ip -n "$NS" link add taxsink type ifb
ip -n "$NS" link set taxsink mtu 65535
ip -n "$NS" addr add 10.60.0.1/24 dev taxsink
ip -n "$NS" link set taxsink up
ip -n "$NS" route add 10.61.0.0/24 dev taxsink

in_ns() { ip netns exec "$NS" taskset -c "$CPU" "$@"; }

CPUFILE=$(mktemp)
# Runs "$@" in the namespace, with its CPU time (task-clock, ms) in $CPUFILE when perf is here.
timed() {
    if command -v perf >/dev/null; then
        in_ns perf stat -x, -e task-clock -o "$CPUFILE" -- "$@"
    else
        : >"$CPUFILE"
        in_ns "$@"
    fi
}
cpu_ms() { awk -F, '/task-clock/ {print $1}' "$CPUFILE"; }

# One run of case $1; prints "GB/s bytes cpu-ms" (cpu-ms empty without perf).
run_case() {
    local out rate bytes
    case $1 in
    liburing-zc | liburing-send | liburing-zc-huge)
        local z=1 huge=()
        [[ $1 == liburing-send ]] && z=0
        [[ $1 == liburing-zc-huge ]] && huge=(-l 1)
        out=$(timed "$PEER" -4 -D "$DEST" -p "$PORT" -s "$SIZE" -n "$INFLIGHT" -z "$z" -b 1 \
            "${huge[@]}" -t "$SECS" -C "$CPU" udp)
        # "packets=N (MB=M), rps=R (MB/s=X)": MB there is MiB (and truncated: bytes from packets).
        rate=$(sed -n 's/.*MB\/s=\([0-9]*\)).*/\1/p' <<<"$out")
        bytes=$(sed -n 's/^packets=\([0-9]*\) .*/\1/p' <<<"$out")
        [[ -n $rate && -n $bytes ]] || return 0
        echo "$(awk -v r="$rate" 'BEGIN {printf "%.2f", r * 1048576 / 1e9}') $((bytes * SIZE)) $(cpu_ms)"
        ;;
    zcnet-uring-zc | zcnet-uring | zcnet-msg-zerocopy | raw-msg-zerocopy | zcnet-*-host | raw-send-zc* | raw-send | raw-send+*)
        if [[ $1 == raw-msg-zerocopy ]]; then
            out=$(timed "$ZCNET" bench raw --loop msg-zerocopy --size "$SIZE" \
                --inflight "$INFLIGHT" --duration "$SECS" --json "$DEST:$PORT")
        elif [[ $1 == raw-send* ]]; then
            # raw-send-zc+one-buffer+ring-fd: each +word is a `bench raw` flag (--one-buffer ...);
            # raw-send: the same loop of IORING_OP_SEND (`bench raw --loop send`).
            local flags=() w loop=send-zc
            [[ $1 == raw-send-zc* ]] || loop=send
            IFS=+ read -ra w <<<"${1#raw-"$loop"}"
            for f in "${w[@]}"; do [[ -n $f ]] && flags+=("--$f"); done
            out=$(timed "$ZCNET" bench raw --loop "$loop" --size "$SIZE" --inflight "$INFLIGHT" \
                --duration "$SECS" --json "${flags[@]}" "$DEST:$PORT")
        else
            local tx=${1#zcnet-} mem=auto
            [[ $tx == *-host ]] && { tx=${tx%-host}; mem=host; }
            out=$(timed "$ZCNET" send --udp --tx "$tx" --mem "$mem" --size "$SIZE" \
                --inflight "$INFLIGHT" --window 0 --duration "$SECS" --json "$DEST:$PORT")
        fi
        rate=$(tr -d ' \n' <<<"$out" | sed -n 's/.*"mb_per_s":\([0-9.]*\).*/\1/p')
        bytes=$(tr -d ' \n' <<<"$out" | sed -n 's/.*"bytes":\([0-9]*\).*/\1/p')
        [[ -n $rate && -n $bytes ]] || return 0
        echo "$(awk -v r="$rate" 'BEGIN {printf "%.2f", r / 1e3}') $bytes $(cpu_ms)"
        ;;
    *)
        echo "send-tax: unknown case $1" >&2
        exit 2
        ;;
    esac
}

echo "send-tax: $(nproc) CPUs, Linux $(uname -r); ifb MTU 65535 in $NS; $SIZE B UDP datagrams," \
    "$INFLIGHT in flight, CPU $CPU, $SECS s per run, $ROUNDS rounds"
echo "  liburing: $PEER$(sed 's/^/ (/; s/$/)/' "$LIBURING/.send-tax-source" 2>/dev/null); zcnet: $ZCNET ($(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?'))"
RESULTS=$(mktemp)
trap 'cleanup; rm -f "$RESULTS" "$CPUFILE"' EXIT
read -ra ALL <<<"$CASES"
for ((r = 1; r <= ROUNDS; r++)); do
    line="round $r:"
    # Each round starts one case later than the last (a rotation), so no case always runs
    # first or right after the same neighbour: the order alone moved results by a few percent.
    order=()
    for ((i = 0; i < ${#ALL[@]}; i++)); do order+=("${ALL[(i + r - 1) % ${#ALL[@]}]}"); done
    for c in "${order[@]}"; do
        g=$(run_case "$c")
        [[ -n $g ]] || { echo "send-tax: $c printed no rate" >&2; exit 1; }
        echo "$c $g" >>"$RESULTS"
        line+=" $c ${g%% *}"
    done
    echo "$line (GB/s)"
done

python3 - "$RESULTS" <<'EOF'
import statistics, sys
rate, eff = {}, {}
for l in open(sys.argv[1]):
    f = l.split()
    rate.setdefault(f[0], []).append(float(f[1]))
    if len(f) > 3 and float(f[3]) > 0:
        # GB per CPU-second: bytes / (task-clock ms / 1000) / 1e9.
        eff.setdefault(f[0], []).append(int(f[2]) / float(f[3]) / 1e6)
def show(name, runs):
    med = {c: statistics.median(v) for c, v in runs.items()}
    print(f"medians, {name}: " + ", ".join(f"{c} {m:.2f}" for c, m in med.items()))
    # The raw SEND_ZC loops against the example (what the choices cost the kernel), and zcnet
    # against the raw loop with its own choices (what the library costs).
    raw = [(c, "liburing-zc") for c in runs if c.startswith("raw-send-zc")]
    raw += [(c, "liburing-send") for c in runs if c.startswith("raw-send") and not c.startswith("raw-send-zc")]
    for z, p in [("zcnet-uring-zc", "liburing-zc"), ("zcnet-uring", "liburing-send"),
                 ("zcnet-msg-zerocopy", "raw-msg-zerocopy"),
                 ("zcnet-uring-zc-host", "liburing-zc"), ("zcnet-uring-host", "liburing-send"),
                 ("zcnet-msg-zerocopy-host", "raw-msg-zerocopy"),
                 ("zcnet-uring-zc", "liburing-zc-huge"), *raw,
                 ("zcnet-uring-zc", "raw-send-zc"), ("zcnet-uring", "raw-send")]:
        if z in runs and p in runs and med[p] > 0:
            per = [a / b for a, b in zip(runs[z], runs[p]) if b > 0]
            print(f"  ratio {z} / {p}: {med[z] / med[p]:.3f}"
                  f" (per round {min(per):.3f}-{max(per):.3f})")
show("GB/s (wall)", rate)
if eff:
    show("GB per CPU-second (perf task-clock)", eff)
EOF
