#!/usr/bin/env bash
# zcnet's hardware suite: the zero-copy success paths that CI cannot run (no NIC there does header
# split), checked in one command on a machine that has such a NIC — the way the kernel's
# drivers/net selftests are pointed at a device and a peer through the environment.
#
#     ZCNET_HW_IFACE=eth1 ZCNET_HW_LOCAL_V4=192.0.2.1 ZCNET_HW_REMOTE_V4=192.0.2.2 \
#     ZCNET_HW_REMOTE_SSH=root@peer ZCNET_HW_GPU=0 scripts/hw-suite.sh
#
# Each test passes (0), fails (1) or skips with a one-line reason (77). The result is a markdown
# table to paste into an issue (--json for machines); the exit status is 1 if any test failed.
# Run `scripts/hw-suite.sh --help` for the variables. Everything the suite changes is undone on
# every exit path: NIC setups restored, the netdevsim device and its namespace deleted.
set -u
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

MECHS="zcrx devmem-rx devmem-tx uring-zc msg-zerocopy copy af-xdp-copy af-xdp-zerocopy"
ALL_TESTS="probe nic-setup-restore zcrx-verify zcrx-udmabuf auto-iface devmem-rx devmem-rx-verify devmem-tx restore-after-kill zcrx-bufsize zcrx-copies bench-rx zcrx-killed devmem-killed devmem-tokens peer-reset two-receivers setup-killed nsim-probe nsim-nic-setup-restore"
# The bindings' tests (the library, the C ABI and Python on a NIC queue) are in a file of
# their own, sourced here: they join the list before the arguments are read.
# shellcheck source=lib/hw-suite-bindings.sh
. "$HERE/lib/hw-suite-bindings.sh"
ALL_TESTS="$ALL_TESTS $BINDING_TESTS"
# The fault tests (scripts/hw-suite-faults.sh), which need the peer as the receive tests do.
FAULT_PEER_TESTS="zcrx-killed devmem-killed devmem-tokens peer-reset two-receivers"

usage() {
  cat <<'EOF'
usage: scripts/hw-suite.sh [--json] [--only TEST,...] [--logs DIR] [--list] [--help]

Checks zcnet on a NIC that can do zero copy: `zcnet probe`, `zcnet nic setup` and `nic restore`,
zcrx and devmem TCP receive with --verify, devmem TCP transmit, and restore after SIGKILL. Prints
a markdown table (--json: one JSON document) and exits 0 if no test failed (skips allowed), 1 if
one did, 2 for bad arguments. Each test skips with a reason when what it needs is not given.

Environment (ZCNET_HW_* are read only from the environment):
  ZCNET_HW_IFACE       the NIC under test (unset: every test on it skips)
  ZCNET_HW_QUEUE       the RX queue to set aside (default: the interface's last RX queue, the
                       one `zcnet recv` and `zcnet probe --active` use; `zcnet nic setup` itself
                       has no default)
  ZCNET_HW_LOCAL_V4    this host's IPv4 address on ZCNET_HW_IFACE (the receive tests listen on it)
  ZCNET_HW_REMOTE_V4   the peer's IPv4 address on that link (devmem-tx sends to it)
  ZCNET_HW_REMOTE_SSH  ssh destination of the peer (user@host); it needs zcnet on its PATH.
                       ssh runs with BatchMode: set up keys (and ControlMaster) beforehand
  ZCNET_HW_REMOTE_ZCNET  the command that runs zcnet on the peer (default: zcnet)
  ZCNET_HW_REMOTE_NETNS  instead of ssh: the peer is this network namespace on this host, e.g.
                       the other end of a software NIC pair (scripts/zcnic-lab.sh); it runs
                       the same zcnet (ZCNET) with 'ip netns exec'
  ZCNET_HW_GPU         CUDA device index for the devmem tests (unset: they skip)
  ZCNET_HW_MEM         the devmem tests' memory instead of a GPU: udmabuf (host memory made a
                       dma-buf: needs /dev/udmabuf; devmem-rx-verify then reads it back)
  ZCNET_HW_PORT        first TCP port used (default 25301; the tests use it and the next 17)
  ZCNET_HW_BYTES       bytes per transfer, N or N with K/M/G (binary) (default 1G)
  ZCNET_HW_TIMEOUT     seconds one transfer may take (default 120)
  ZCNET_HW_SETTLE      seconds to wait after a run for the kernel to let go of a zcrx area or a
                       devmem binding before the NIC state is compared (default 180)
  ZCNET                the zcnet binary (default: zcnet on PATH, else target/release/zcnet)
  ZCNET_STATE_DIR      passed to zcnet: where `nic setup` keeps its state files (/run/zcnet)
  ZCNET_HW_BINDINGS    the cargo build directory with the bindings' programs (examples/nic_recv,
                       libzcnet_ffi.so, lib_zcnet.so) for the lib-*, c-* and py-* tests
                       (default: target/debug; scripts/zcnic-lab.sh builds and stages them)

Tests (--only takes a comma-separated list of these):
  probe                  zcnet probe --iface IF --json parses and gives every mechanism a verdict
  nic-setup-restore      nic setup --keep: header split, queue out of RSS, flow rule as reported;
                         nic restore: the NIC state (zcnet and ethtool views) equals the one before
  zcrx-verify            peer sends (zcnet send --verify over ssh) to LOCAL_V4; here
                         nic setup -- zcnet recv --rx zcrx --verify: exact bytes, verified, zero copy
  zcrx-udmabuf           zcrx-verify with the area a dma-buf of host memory (--mem udmabuf:
                         IORING_ZCRX_AREA_DMABUF; needs /dev/udmabuf), every byte read back
  auto-iface             zcrx-verify with --rx auto: auto must choose zcrx on a NIC that can
  devmem-rx              the same into GPU memory with --rx devmem --mem cuda:N (or ZCNET_HW_MEM)
                         (not verified)
  devmem-rx-verify       devmem-rx with --verify: every device buffer read back and checked
  devmem-tx              zcnet send --tx devmem --mem cuda:N (or ZCNET_HW_MEM) to a zcnet recv
                         --verify on the peer
  restore-after-kill     SIGKILL a holding zcnet nic setup; nic restore brings the NIC back
  zcrx-bufsize           zcrx-verify with --rx-buf-len 64K into a 16 MiB area of reserved 2 MiB
                         huge pages (scripts/hw-suite-zcrx.sh has these three); the driver's
                         per-queue counters (ethtool -S, where it has them) must show buffers
                         larger than a page; skips where the kernel's zcrx query lacks rx-buf-len
  zcrx-copies            zcnet's zero-copy/copied split against the kernel's and the driver's
                         counts: a 64 KiB area that runs dry (drops, no copies), and a flow
                         steered to another queue than zcrx's (every byte copied)
  bench-rx               zcnet bench rx --iface with the peer's namespace as the clients
                         (ZCNET_HW_REMOTE_NETNS): its zcrx and devmem rows must each move their
                         bytes by that mechanism
  zcrx-killed            recv --rx zcrx stopped mid-stream holding buffers, then SIGKILLed: the
                         kernel lets go of the queue, nic restore undoes the setup, the driver
                         module's refcnt is as before (scripts/hw-suite-faults.sh has these)
  devmem-killed          the same for recv --rx devmem (its tokens not given back)
  devmem-tokens          devmem into a 256 KiB dma-buf (ZCNET_HW_MEM=udmabuf): the provider runs
                         dry over and over; the stream completes, every byte checked
  peer-reset             the peer killed mid-stream (FIN) and resetting (RST): recv exits 1 with
                         its one line ('cut short', 'reset by the peer'), NIC restored, area freed
  two-receivers          a second zcrx (and devmem) receiver on a bound queue is refused in one
                         line naming the queue; the first still receives and verifies
  setup-killed           nic setup SIGKILLed between each two of its steps (held there by
                         strace); nic restore gives back exactly the state before
  lib-zcrx, lib-devmem   zcrx-verify and devmem-rx-verify (into a udmabuf: needs /dev/udmabuf)
                         through the library: crates/zcnet/examples/nic_recv, a Receiver with an
                         interface and queue, every byte checked by it; zero copy required
  c-zcrx, c-zcrx-udmabuf, c-devmem
                         the same through the C ABI (examples/c/nic_recv.c, compiled here;
                         zcnet_receiver_new_in binds a udmabuf region, zcnet_receiver_read copies
                         its bytes out) (scripts/lib/hw-suite-bindings.sh has these)
  py-zcrx, py-devmem     the same through Python (crates/zcnet-py/examples/nic_recv.py:
                         zcnet.Receiver(iface=, queue=, mem="udmabuf"))
  nsim-probe, nsim-nic-setup-restore
                         probe and nic-setup-restore on a netdevsim device in a private network
                         namespace (root, and a kernel with netdevsim; otherwise they skip)

Options:
  --json        one JSON document on stdout instead of the table (progress stays on stderr)
  --only LIST   run only these tests (the others are not listed)
  --logs DIR    copy every command's output (stdout, stderr, JSON) into DIR
  --list        print the test names and exit

Nothing is sent except to ZCNET_HW_LOCAL_V4/ZCNET_HW_REMOTE_V4 and inside the netdevsim namespace.
EOF
}

# ---------------------------------------------------------------------------------------------
# Arguments and environment.

JSON=0
ONLY=""
LOGS=""
while [ $# -gt 0 ]; do
  case $1 in
    --json) JSON=1 ;;
    --only) [ $# -ge 2 ] || { echo "hw-suite: --only needs a list of tests" >&2; exit 2; }; ONLY=$2; shift ;;
    --only=*) ONLY=${1#--only=} ;;
    --logs) [ $# -ge 2 ] || { echo "hw-suite: --logs needs a directory" >&2; exit 2; }; LOGS=$2; shift ;;
    --logs=*) LOGS=${1#--logs=} ;;
    --list) for t in $ALL_TESTS; do echo "$t"; done; exit 0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "hw-suite: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for t in ${ONLY//,/ }; do
  case " $ALL_TESTS " in
    *" $t "*) ;;
    *) echo "hw-suite: --only: no test named '$t' (tests: $ALL_TESTS)" >&2; exit 2 ;;
  esac
done

IFACE=${ZCNET_HW_IFACE:-}
QUEUE=${ZCNET_HW_QUEUE:-}
LOCAL_V4=${ZCNET_HW_LOCAL_V4:-}
REMOTE_V4=${ZCNET_HW_REMOTE_V4:-}
REMOTE_SSH=${ZCNET_HW_REMOTE_SSH:-}
REMOTE_ZCNET=${ZCNET_HW_REMOTE_ZCNET:-zcnet}
REMOTE_NETNS=${ZCNET_HW_REMOTE_NETNS:-}
GPU=${ZCNET_HW_GPU:-}
MEM=${ZCNET_HW_MEM:-}
PORT=${ZCNET_HW_PORT:-25301}
BYTES_ARG=${ZCNET_HW_BYTES:-1G}
TMO=${ZCNET_HW_TIMEOUT:-120}

bad_env() { echo "hw-suite: $1" >&2; exit 2; }
is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; *) return 0 ;; esac; }
[ -z "$IFACE" ] || { [[ $IFACE != */* && $IFACE != . && $IFACE != .. ]] && [ -e "/sys/class/net/$IFACE" ]; } || bad_env "ZCNET_HW_IFACE=$IFACE: no interface by that name in this network namespace: give one 'ip link' lists"
[ -z "$QUEUE" ] || is_uint "$QUEUE" || bad_env "ZCNET_HW_QUEUE='$QUEUE': give a queue number"
[ -z "$GPU" ] || is_uint "$GPU" || bad_env "ZCNET_HW_GPU='$GPU': give a CUDA device index (0, 1, ...)"
case $MEM in '' | udmabuf) ;; *) bad_env "ZCNET_HW_MEM='$MEM': the only memory besides a GPU is udmabuf" ;; esac
[ -z "$MEM" ] || [ -z "$GPU" ] || bad_env "ZCNET_HW_MEM and ZCNET_HW_GPU both set: give one memory for the devmem tests"
[ -z "$REMOTE_NETNS" ] || [ -z "$REMOTE_SSH" ] || bad_env "ZCNET_HW_REMOTE_NETNS and ZCNET_HW_REMOTE_SSH both set: the peer is one or the other"
if [ -n "$REMOTE_NETNS" ] && [ ! -e "/run/netns/$REMOTE_NETNS" ]; then
  bad_env "ZCNET_HW_REMOTE_NETNS=$REMOTE_NETNS: no such network namespace (ip netns list)"
fi
# The devmem tests' memory: a GPU's, or a udmabuf.
DMEM=${MEM:-${GPU:+cuda:$GPU}}
bindings_check_env || exit 2
{ is_uint "$PORT" && [ "$PORT" -ge 1 ] && [ "$PORT" -le 65518 ]; } || bad_env "ZCNET_HW_PORT='$PORT': give a port from 1 to 65518"
{ is_uint "$TMO" && [ "$TMO" -ge 1 ]; } || bad_env "ZCNET_HW_TIMEOUT='$TMO': give whole seconds"
is_uint "${ZCNET_HW_SETTLE:-180}" || bad_env "ZCNET_HW_SETTLE='${ZCNET_HW_SETTLE:-}': give whole seconds"
case $BYTES_ARG in
  *[kK]) n=${BYTES_ARG%?} m=1024 ;;
  *[mM]) n=${BYTES_ARG%?} m=1048576 ;;
  *[gG]) n=${BYTES_ARG%?} m=1073741824 ;;
  *) n=$BYTES_ARG m=1 ;;
esac
{ is_uint "$n" && [ "$n" -ge 1 ]; } || bad_env "ZCNET_HW_BYTES='$BYTES_ARG': give bytes like 1048576, 64M or 1G"
BYTES=$((n * m))
for v in "$LOCAL_V4" "$REMOTE_V4"; do
  [ -z "$v" ] || [[ $v =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || bad_env "'$v' is not an IPv4 address (ZCNET_HW_LOCAL_V4/ZCNET_HW_REMOTE_V4)"
done

ZCNET_WHY=""
if [ -n "${ZCNET:-}" ]; then
  if [ -x "$ZCNET" ] || command -v "$ZCNET" >/dev/null 2>&1; then :; else
    ZCNET_WHY="ZCNET=$ZCNET is not an executable"
  fi
elif command -v zcnet >/dev/null 2>&1; then
  ZCNET=$(command -v zcnet)
elif [ -x "$REPO/target/release/zcnet" ]; then
  ZCNET=$REPO/target/release/zcnet
else
  ZCNET=""
  ZCNET_WHY="no zcnet binary: not on PATH, no $REPO/target/release/zcnet (build it with 'cargo build --release -p zcnet-cli' or set ZCNET)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zcnet-hw.XXXXXX") || exit 2
DETAIL_FILE=$WORK/detail
: >"$WORK/pids"

# ---------------------------------------------------------------------------------------------
# Cleanup: runs on every exit path.

TPID=""
NSIM_ID=""
NSIM_NS=""
NSIM_IF=""
NSIM_LINE=""
NSIM_SKIP=""

nsim_delete() {
  if [ -n "$NSIM_ID" ]; then
    { echo "$NSIM_ID" >/sys/bus/netdevsim/del_device; } 2>/dev/null
    NSIM_ID=""
  fi
  if [ -n "$NSIM_NS" ]; then
    ip netns del "$NSIM_NS" 2>/dev/null
    NSIM_NS=""
  fi
}

# A setup a test left applied (--keep, or a SIGKILLed holder): undo it. Fails if it could not.
restore_dirty() {
  local m ns ifc rc=0
  for m in "$WORK"/dirty-*; do
    [ -e "$m" ] || continue
    read -r ns ifc <"$m"
    echo "hw-suite: restoring $ifc, left set up by an unfinished test" >&2
    if [ "$ns" = "-" ]; then
      "$ZCNET" nic restore --iface "$ifc" >&2 || rc=1
    else
      ip netns exec "$ns" "$ZCNET" nic restore --iface "$ifc" >&2 || rc=1
    fi
    rm -f "$m"
  done
  return "$rc"
}

cleanup() {
  trap - INT TERM HUP
  local p left=0
  # An interrupted test: its process group, and the processes it started (recorded in pids)
  # get SIGTERM, which makes a holding `zcnet nic setup` restore the NIC before it exits.
  if [ -n "$TPID" ] && kill -TERM -- "-$TPID" 2>/dev/null; then left=1; fi
  while read -r p; do
    [ -n "$p" ] && kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null && left=1
  done <"$WORK/pids"
  if [ "$left" = 1 ]; then
    for _ in $(seq 1 70); do
      left=0
      [ -n "$TPID" ] && kill -0 -- "-$TPID" 2>/dev/null && left=1
      while read -r p; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && left=1; done <"$WORK/pids"
      [ "$left" = 0 ] && break
      sleep 0.1
    done
  fi
  restore_dirty
  nsim_delete
  if [ -n "$LOGS" ]; then
    mkdir -p "$LOGS" && cp -r "$WORK"/. "$LOGS"/ 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------------------------------------
# Helpers.

progress() { echo "hw-suite: $*" >&2; }
now() { if [ -n "${EPOCHREALTIME:-}" ]; then echo "$EPOCHREALTIME"; else date +%s.%N; fi; }
has() { command -v "$1" >/dev/null 2>&1; }

# One line: whitespace runs as one space, at most 400 characters.
one_line() {
  local s
  s=$(printf '%s' "$1" | tr '\n\r\t' '   ' | sed -e 's/  */ /g' -e 's/^ //' -e 's/ $//')
  [ ${#s} -le 400 ] || s="${s:0:397}..."
  printf '%s' "$s"
}

json_str() {
  local s
  s=$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\t'/\\t}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  printf '"%s"' "$s"
}

# Inside a test (a subshell): its verdict and one-line detail.
pass() { printf '%s\n' "$*" >"$DETAIL_FILE"; exit 0; }
fail() { printf '%s\n' "$*" >"$DETAIL_FILE"; exit 1; }
skip() { printf '%s\n' "$*" >"$DETAIL_FILE"; exit 77; }

# zcnet's own error line in FILE (its last "zcnet..." line), else the last non-empty line.
zline() {
  local l
  l=$(grep -E '^zcnet' "$1" 2>/dev/null | grep -vE '^zcnet (recv|send): (listening|auto chose|from )' | tail -n 1)
  [ -n "$l" ] || l=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1)
  [ -n "$l" ] || l="(no output)"
  one_line "$l"
}

# Runs a command in the test's namespace (T_NS; empty: this one). Not for background commands
# whose pid is needed: use "${NSX[@]}" directly (ip netns exec execs, keeping the pid).
run_in() {
  if [ -n "$T_NS" ]; then ip netns exec "$T_NS" "$@"; else "$@"; fi
}

# The embedded reader of zcnet's JSON.
PY=$(
  cat <<'EOF'
import json, sys

def load(f, which):
    txt = open(f).read()
    if which == "doc":
        return json.loads(txt)
    docs = []
    for l in txt.splitlines():
        l = l.strip()
        if l.startswith("{"):
            try:
                docs.append(json.loads(l))
            except ValueError:
                pass
    if not docs:
        sys.exit("no JSON document in " + f)
    return docs[0] if which == "first" else docs[-1]

def iface_of(d, name):
    ifs = [i for i in d.get("interfaces", []) if i.get("name") == name]
    if len(ifs) != 1:
        sys.exit("probe JSON has %d interfaces named %s" % (len(ifs), name))
    return ifs[0]

cmd, a = sys.argv[1], sys.argv[2:]
if cmd == "get":  # FILE WHICH EXPR: a value of the document (d)
    v = eval(a[2], {"d": load(a[0], a[1])})
    print(json.dumps(v) if isinstance(v, (dict, list, bool)) or v is None else v)
elif cmd == "probe":  # FILE IFACE MECHS: one line naming each verdict, or exit 1 with the reason
    d = load(a[0], "doc")
    i = iface_of(d, a[1])
    ms = i.get("mechanisms", {})
    out, bad = [], []
    for m in a[2].split():
        v = ms.get(m, {}).get("verdict")
        if v not in ("zero-copy", "copies", "unsupported"):
            bad.append("%s has no verdict (%r)" % (m, v))
        else:
            out.append("%s %s" % (m, v))
    if not d.get("kernel", {}).get("release"):
        bad.append("no kernel release")
    if bad:
        print("; ".join(bad))
        sys.exit(1)
    print("driver %s (%s, header split %s): %s" % (i.get("driver") or "none", i.get("kind"), i.get("header_split"), ", ".join(out)))
elif cmd == "facts":  # FILE IFACE: kind, header split, RX queues, last RX queue
    i = iface_of(load(a[0], "doc"), a[1])
    rx = [q["id"] for q in i.get("queues", []) if q.get("type") == "rx"]
    print(i.get("kind"), i.get("header_split"), len(rx), max(rx) if rx else -1)
elif cmd == "verdict":  # FILE IFACE MECH: verdict<TAB>reason
    m = iface_of(load(a[0], "doc"), a[1]).get("mechanisms", {}).get(a[2], {})
    print("%s\t%s" % (m.get("verdict"), m.get("reason")))
elif cmd == "snap-status":  # FILE IFACE: what `nic status --json` says of the device, normalized
    d = load(a[0], "doc")
    print(json.dumps([x for x in d.get("devices", []) if x.get("iface") == a[1]], sort_keys=True, indent=1))
    print("state files: %d" % len([x for x in d.get("applied", []) if x.get("iface") == a[1]]))
elif cmd == "snap-probe":  # FILE IFACE: the probe's view of the device's configuration
    i = iface_of(load(a[0], "doc"), a[1])
    keep = {k: i.get(k) for k in ("header_split", "hds_thresh", "hds_thresh_max", "channels",
                                  "ntuple", "rss_contexts", "bindings", "up")}
    keep["queues"] = sorted("%s %s" % (q.get("type"), q.get("id")) for q in i.get("queues", []))
    print(json.dumps(keep, sort_keys=True, indent=1))
elif cmd == "applied":  # FILE IFACE: state files of IFACE and whether their process is alive
    d = load(a[0], "doc")
    print(" ".join("alive" if x.get("process_alive") else "dead"
                   for x in d.get("applied", []) if x.get("iface") == a[1]))
elif cmd == "nic-check":  # STATUSFILE IFACE QUEUE PORT(or -): the setup as the device reports it
    d = load(a[0], "doc")
    iface, q, port = a[1], int(a[2]), a[3]
    devs = [x for x in d.get("devices", []) if x.get("iface") == iface]
    if not devs:
        sys.exit("nic status reports nothing for " + iface)
    dev, ok, bad = devs[0], [], []
    r = dev.get("rings") or {}
    if "error" in r:
        bad.append("ring parameters unreadable: " + r["error"])
    elif r.get("tcp_data_split") != "on":
        bad.append("tcp-data-split is %s, not on" % r.get("tcp_data_split"))
    elif r.get("hds_thresh") not in (0, None):
        bad.append("hds-thresh is %s, not 0" % r.get("hds_thresh"))
    else:
        ok.append("header split on, hds-thresh %s" % r.get("hds_thresh"))
    ind = dev.get("rss_indirection")
    if not isinstance(ind, list):
        bad.append("RSS table unreadable: %s" % (ind or {}).get("error"))
    elif q in ind:
        bad.append("queue %d is still in the RSS table" % q)
    else:
        ok.append("queue %d out of RSS (%d entries over %d queues)" % (q, len(ind), len(set(ind))))
    if port != "-":
        rules = dev.get("rules")
        want = "dst-port %s action %d" % (port, q)
        if not isinstance(rules, list):
            bad.append("flow rules unreadable: %s" % (rules or {}).get("error"))
        elif not any(want in x for x in rules):
            bad.append("no rule '%s' among %s" % (want, rules))
        else:
            ok.append("rule dst-port %s -> queue %d" % (port, q))
    print("; ".join(bad or ok))
    sys.exit(1 if bad else 0)
else:
    sys.exit("unknown helper " + cmd)
EOF
)
# The interpreter itself, not a version manager's shim (which can cost half a second a call).
PYTHON=""
if has python3; then
  PYTHON=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null)
  [ -n "$PYTHON" ] || PYTHON=python3
fi
py() { "$PYTHON" -c "$PY" "$@"; }

# Preconditions, each a skip (what is not given) or a failure (what is given but broken).
need_iface() { [ -n "$T_IF" ] || skip "ZCNET_HW_IFACE not set (the NIC under test)"; }
need_zcnet() { [ -z "$ZCNET_WHY" ] || fail "$ZCNET_WHY"; }
need_python() { [ -n "$PYTHON" ] || fail "python3 is needed to read zcnet's JSON"; }
need_root() { [ "$(id -u)" = 0 ] || skip "needs root ($1)"; }
need_local() {
  [ -n "$LOCAL_V4" ] || skip "ZCNET_HW_LOCAL_V4 not set (this host's address on $T_IF)"
  ip -o -4 addr show dev "$T_IF" 2>/dev/null | grep -q " $LOCAL_V4/" ||
    fail "ZCNET_HW_LOCAL_V4=$LOCAL_V4 is not an address of $T_IF ($(ip -o -4 addr show dev "$T_IF" 2>&1 | awk '{print $4}' | tr '\n' ' '))"
}
need_remote_v4() {
  [ -n "$REMOTE_V4" ] || skip "ZCNET_HW_REMOTE_V4 not set (the peer's address on $T_IF)"
  local dev
  dev=$(ip -o route get "$REMOTE_V4" 2>/dev/null | sed -n 's/.* dev \([^ ]*\).*/\1/p')
  [ "$dev" = "$T_IF" ] || fail "ZCNET_HW_REMOTE_V4=$REMOTE_V4 is routed via '${dev:-nothing}', not $T_IF"
}
need_remote() {
  [ -n "$REMOTE_SSH" ] || [ -n "$REMOTE_NETNS" ] ||
    skip "neither ZCNET_HW_REMOTE_SSH nor ZCNET_HW_REMOTE_NETNS set (the peer that runs zcnet)"
  [ -z "$REMOTE_WHY" ] || fail "$REMOTE_WHY"
}
# How a devmem run went: the GPU path's name (devmem, zcrx-dmabuf, staging) from "path", or with
# udmabuf memory the mechanism ("rx"/"tx": the host-memory commands report no GPU path).
devmem_path() { # FILE rx|tx
  if [ "$MEM" = udmabuf ]; then py get "$1" last "d[\"$2\"]"; else py get "$1" last 'd["path"]'; fi
}
need_gpu() { [ -n "$DMEM" ] || skip "neither ZCNET_HW_GPU nor ZCNET_HW_MEM set (devmem needs a dma-buf: give a CUDA device index, or udmabuf)"; }

# What the peer runs: 'timeout T REMOTE_ZCNET args...' (the timeout also ends a receiver whose
# ssh went away: without a terminal, the peer's processes do not get SIGHUP).
SSH_OPTS=(-n -o BatchMode=yes -o ConnectTimeout=10)
remote_cmd() { printf 'timeout %s %s %s' "$TMO" "$REMOTE_ZCNET" "$(printf '%q ' "$@")"; }
# peer ARGS...: zcnet ARGS on the peer (ssh, or the namespace), as this process (exec): run it
# as `peer ... &` or `(peer ...)`, so that $! or the subshell is the peer's command itself.
peer() {
  if [ -n "$REMOTE_NETNS" ]; then
    exec ip netns exec "$REMOTE_NETNS" timeout "$TMO" "${ZCNET:-zcnet}" "$@" </dev/null
  fi
  # shellcheck disable=SC2029 # the command is built (and quoted) here on purpose
  exec ssh "${SSH_OPTS[@]}" "$REMOTE_SSH" "$(remote_cmd "$@")"
}

# The probe of the device under test, once per context.
probe_file() {
  local f=$WORK/probe-$T_LABEL.json
  if [ ! -s "$f" ]; then
    run_in "$ZCNET" probe --iface "$T_IF" --json >"$f.tmp" 2>"$WORK/probe-$T_LABEL.err" || {
      rm -f "$f.tmp"
      return 1
    }
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# kind header_split rx_queue_count last_rx_queue (from the probe).
facts() {
  local f
  f=$(probe_file) || fail "zcnet probe --iface $T_IF failed: $(zline "$WORK/probe-$T_LABEL.err")"
  py facts "$f" "$T_IF" 2>"$TW/py.err" || fail "reading the probe: $(zline "$TW/py.err")"
}

# The queue to set aside: ZCNET_HW_QUEUE, else the last RX queue.
pick_queue() {
  if [ -n "$QUEUE" ] && [ "$T_LABEL" = hw ]; then
    echo "$QUEUE"
    return
  fi
  local fx kind split n last
  fx=$(facts) || exit $?
  read -r kind split n last <<<"$fx"
  if [ "${last:--1}" -lt 0 ]; then
    n=$(run_in sh -c "ls -d /sys/class/net/$T_IF/queues/rx-* 2>/dev/null | wc -l")
    last=$((n - 1))
  fi
  [ "$last" -ge 0 ] || fail "cannot tell $T_IF's RX queues (set ZCNET_HW_QUEUE)"
  echo "$last"
}

# A refusal: a skip when the device (or kernel) cannot, a failure when it should have worked.
# $1 what was refused, $2 zcnet's line.
refused() {
  local what=$1 line=$2 fx kind split n last
  case $line in
    *EOPNOTSUPP* | *"not supported"*)
      skip "$T_IF cannot: $what refused: $line" ;;
  esac
  fx=$(facts) || exit $?
  read -r kind split n last <<<"$fx"
  case $kind in
    physical) ;;
    *) skip "$T_IF is a $kind (software) device: $what refused cleanly: $line" ;;
  esac
  [ "$split" != not-reported ] || skip "$T_IF does not report header split: $what refused cleanly: $line"
  [ "${n:-0}" -ge 2 ] || skip "$T_IF has one RX queue: $what refused cleanly: $line"
  fail "$what failed: $line"
}

# The NIC state as zcnet (nic status, probe) and ethtool report it, to compare before and after.
snapshot() {
  local out=$1 i=0 opt
  {
    echo "## zcnet nic status"
    if run_in "$ZCNET" nic status --iface "$T_IF" --json >"$TW/snap-status.json" 2>"$TW/snap.err"; then
      py snap-status "$TW/snap-status.json" "$T_IF" 2>&1
    else
      echo "nic status failed: $(zline "$TW/snap.err")"
    fi
    echo "## zcnet probe"
    if run_in "$ZCNET" probe --iface "$T_IF" --json >"$TW/snap-probe.json" 2>"$TW/snap.err"; then
      py snap-probe "$TW/snap-probe.json" "$T_IF" 2>&1
    else
      echo "probe failed: $(zline "$TW/snap.err")"
    fi
    if has ethtool; then
      for opt in -g -l -x -n; do
        echo "## ethtool $opt"
        run_in ethtool "$opt" "$T_IF" 2>&1
      done
      echo "## ethtool -k (ntuple)"
      run_in ethtool -k "$T_IF" 2>&1 | grep -E 'ntuple|rx-hashing'
    fi
  } >"$out"
  i=$(wc -l <"$out")
  echo "$i"
}

# snapshot OUT, taken again (up to ZCNET_HW_SETTLE seconds, default 180) while it differs from
# BEFORE only in a memory provider still bound: the kernel lets go of a zcrx area or a devmem
# binding asynchronously after the process that held it exits (io_uring's ring teardown runs in
# a workqueue and retries cancelling what is in flight; a page pool is destroyed once its pages
# in flight come back). In a loaded TCG guest this was seen to take over 60 s. SETTLED_WAIT
# says how long it took.
# Lets every CPU run its network receive softirq once, by a UDP datagram over loopback from a
# process pinned to it. An skb consumed on another CPU than the one that allocated it waits on
# that CPU's defer list until the CPU next runs the softirq (skb_attempt_defer_free(), Linux
# 5.17's "tcp: defer skb freeing after socket lock is released"), and holds its page-pool
# buffers meanwhile: with the device idle after a run, a page pool of the run could linger for
# minutes (seen in the 7.2 guest).
kick_cpus() {
  local c
  has taskset || return 0
  for c in $(seq 0 $(($(nproc --all) - 1))); do
    run_in taskset -c "$c" bash -c 'echo >/dev/udp/127.0.0.1/9' 2>/dev/null
  done
}

settled_snapshot() {
  local out=$1 before=$2 t0 limit=${ZCNET_HW_SETTLE:-180}
  snapshot "$out" >/dev/null
  t0=$SECONDS
  # Seconds of the clock, not rounds: a snapshot takes seconds itself in a TCG guest.
  while [ $((SECONDS - t0)) -lt "$limit" ] && only_bindings_differ "$before" "$out"; do
    kick_cpus
    sleep 1
    snapshot "$out" >/dev/null
  done
  SETTLED_WAIT=$((SECONDS - t0))
}

# snapshot OUT for "before": first waits (up to ZCNET_HW_SETTLE seconds) while the device lists
# more page pools with a memory provider than queues bound to one. Such a pool is an earlier
# run's that the kernel has not freed yet (it lingers while buffers it lent are still out, see
# kick_cpus); in "before" it would make the comparison wait for it.
snapshot_before() {
  local t0=$SECONDS limit=${ZCNET_HW_SETTLE:-180} f=$TW/pools.json
  local expr="(lambda b: int(sum(x.startswith('page pool ') for x in b) > sum(x.startswith('rx queue ') for x in b)))([x for i in d['interfaces'] if i['name'] == '$T_IF' for x in (i.get('bindings') or [])])"
  while [ $((SECONDS - t0)) -lt "$limit" ] && run_in "$ZCNET" probe --iface "$T_IF" --json >"$f" 2>/dev/null &&
    [ "$(py get "$f" doc "$expr" 2>/dev/null)" = 1 ]; do
    kick_cpus
    sleep 1
  done
  snapshot "$1"
}

# Whether snapshots A and B differ, and only in the lines of memory-provider bindings.
only_bindings_differ() {
  local d
  d=$(diff -U0 "$1" "$2" | grep -E '^[-+][^-+]') || return 1
  ! grep -v -q -E '^[-+][[:space:]]*("bindings"|"page pool [0-9]+: |\],?$)' <<<"$d"
}

# "" when equal, else the first differences in one line.
differs() {
  diff "$1" "$2" >/dev/null && return 0
  one_line "$(diff -U0 "$1" "$2" | grep -E '^[-+][^-+]' | head -n 6 | tr '\n' ' ')"
}

# A setup the test may leave applied (the cleanup restores it if the test does not finish).
mark_dirty() { echo "${T_NS:--} $T_IF" >"$WORK/dirty-$T_LABEL"; }
unmark_dirty() { rm -f "$WORK/dirty-$T_LABEL"; }

# Waits until FILE has PATTERN (0), PID exits (1) or SECS pass (2).
wait_for() {
  local f=$1 pat=$2 pid=$3 n=$(($4 * 10))
  while [ "$n" -gt 0 ]; do
    grep -q -- "$pat" "$f" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { grep -q -- "$pat" "$f" 2>/dev/null && return 0; return 1; }
    sleep 0.1
    n=$((n - 1))
  done
  return 2
}

# Waits for PID at most SECS, then SIGTERMs it; its exit status.
wait_bounded() {
  local pid=$1 n=$(($2 * 10))
  while [ "$n" -gt 0 ] && kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
    n=$((n - 1))
  done
  kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
  wait "$pid"
}

# ---------------------------------------------------------------------------------------------
# The tests. Each runs in a subshell with T_IF (device), T_NS (its namespace, empty for this
# one), T_LABEL (hw or nsim), T_PORTLESS (1: no flow rule) and TW (its work directory).

t_probe() {
  need_iface
  need_zcnet
  need_python
  local f
  f=$(probe_file) || fail "zcnet probe --iface $T_IF --json failed: $(zline "$WORK/probe-$T_LABEL.err")"
  cp "$f" "$TW/probe.json"
  local sum
  sum=$(py probe "$f" "$T_IF" "$MECHS" 2>&1) || fail "zcnet probe --json: $(one_line "$sum")"
  pass "$sum"
}

t_nic_setup_restore() {
  need_iface
  need_zcnet
  need_python
  need_root "zcnet nic setup changes the NIC"
  local q rc nb line portargs=() portchk=- changes
  q=$(pick_queue) || exit $?
  if [ "$T_PORTLESS" != 1 ]; then portargs=(--port "$PORT"); portchk=$PORT; fi
  nb=$(snapshot "$TW/before.txt")
  mark_dirty
  run_in "$ZCNET" nic setup --iface "$T_IF" --queue "$q" ${portargs[@]+"${portargs[@]}"} --json --keep >"$TW/setup.out" 2>"$TW/setup.err"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    line=$(zline "$TW/setup.err")
    snapshot "$TW/after.txt" >/dev/null
    local d
    d=$(differs "$TW/before.txt" "$TW/after.txt")
    [ -z "$d" ] || fail "nic setup exited $rc ($line) and left the NIC changed: $d"
    unmark_dirty
    [ "$rc" -ne 2 ] || fail "nic setup exited 2 (bad arguments): $line"
    refused "nic setup --queue $q" "$line"
  fi
  changes=$(py get "$TW/setup.out" last 'len(d["changes"])' 2>/dev/null || echo "?")
  run_in "$ZCNET" nic status --iface "$T_IF" --json >"$TW/status.json" 2>"$TW/status.err" ||
    fail "nic status while set up: $(zline "$TW/status.err")"
  local seen
  seen=$(py nic-check "$TW/status.json" "$T_IF" "$q" "$portchk" 2>&1)
  rc=$?
  run_in "$ZCNET" nic restore --iface "$T_IF" >"$TW/restore.out" 2>"$TW/restore.err"
  local rrc=$?
  [ "$rc" -eq 0 ] || fail "after nic setup ($changes change(s)): $(one_line "$seen")"
  [ "$rrc" -eq 0 ] || fail "nic restore exited $rrc: $(zline "$TW/restore.err")"
  unmark_dirty
  local undone d
  undone=$(grep -c 'undid' "$TW/restore.out")
  snapshot "$TW/after.txt" >/dev/null
  d=$(differs "$TW/before.txt" "$TW/after.txt")
  [ -z "$d" ] || fail "state after nic restore differs from before: $d"
  pass "queue $q: $seen; nic restore undid $undone of $changes change(s); state equal to before ($nb lines compared)"
}

# A stream from the peer to LOCAL_V4 received here under `nic setup -- zcnet recv ...`; returns
# (RX_Q: the queue) only when both ends succeeded with exactly ZCNET_HW_BYTES, the NIC restored.
# $1 test port, then zcnet recv's mechanism arguments. RX_RECV_QUEUE set: recv binds that queue
# instead of the one the flow is steered to.
# The common preconditions of a test that receives from the peer on a set-up queue.
need_rx_peer() {
  need_iface
  need_zcnet
  need_python
  need_local
  need_remote
  need_root "zcnet nic setup changes the NIC"
}

rx_case() {
  local port=$1
  shift
  # The receiving command after `nic setup --`: zcnet recv, or a binding's program.
  [ -n "${RX_PROG+x}" ] || RX_PROG=("$ZCNET" recv --json)
  need_rx_peer
  local q pid rc src rrc w line nb d
  q=$(pick_queue) || exit $?
  nb=$(snapshot_before "$TW/before.txt")
  mark_dirty
  timeout --foreground -s TERM "$((TMO + 30))" "$ZCNET" nic setup --iface "$T_IF" --queue "$q" --port "$port" --json -- \
    "${RX_PROG[@]}" --listen "$LOCAL_V4:$port" --iface "$T_IF" --queue "${RX_RECV_QUEUE:-$q}" "$@" \
    >"$TW/recv.out" 2>"$TW/recv.err" &
  pid=$!
  echo "$pid" >>"$WORK/pids"
  wait_for "$TW/recv.err" "listening on" "$pid" 60
  w=$?
  if [ "$w" -ne 0 ]; then
    [ "$w" -eq 2 ] && kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    line=$(zline "$TW/recv.err")
    snapshot "$TW/after.txt" >/dev/null
    d=$(differs "$TW/before.txt" "$TW/after.txt")
    [ -z "$d" ] || fail "zcnet exited $rc ($line) and left the NIC changed: $d"
    unmark_dirty
    [ "$w" -eq 2 ] && fail "zcnet recv did not listen within 60 s: $line"
    case $rc:$line in
      2:*--verify*) skip "zcnet refuses this combination: $line" ;;
    esac
    [ "$rc" -ne 2 ] || fail "exited 2 (bad arguments): $line"
    refused "recv $*" "$line"
  fi
  # RX_SEND_ARGS: more words for the peer's send (a case whose receiver starves on purpose
  # gives it a longer --stall-timeout).
  # shellcheck disable=SC2086 # words, split on purpose
  (peer send "$LOCAL_V4:$port" --verify --bytes "$BYTES" --json ${RX_SEND_ARGS:-}) >"$TW/send.out" 2>"$TW/send.err"
  src=$?
  # The receiver ends with the stream; after a failed send it may still wait for one.
  if [ "$src" -eq 0 ]; then wait_bounded "$pid" 30; else wait_bounded "$pid" 2; fi
  rrc=$?
  settled_snapshot "$TW/after.txt" "$TW/before.txt"
  d=$(differs "$TW/before.txt" "$TW/after.txt")
  [ -z "$d" ] && unmark_dirty
  [ -z "$d" ] || d="$d (after waiting ${SETTLED_WAIT} s for the kernel to let go)"
  [ "$rrc" -eq 0 ] || fail "recv exited $rrc: $(zline "$TW/recv.err"); peer's send exited $src: $(zline "$TW/send.err")"
  [ "$src" -eq 0 ] || fail "peer's zcnet send exited $src: $(zline "$TW/send.err")"
  [ -z "$d" ] || fail "the NIC was not restored after the run: $d"
  local sent got
  sent=$(py get "$TW/send.out" last 'd["bytes"]' 2>&1) || fail "peer's send JSON: $(one_line "$sent")"
  got=$(py get "$TW/recv.out" last 'd["bytes"]' 2>&1) || fail "recv JSON: $(one_line "$got")"
  [ "$sent" = "$BYTES" ] || fail "the peer sent $sent B, not $BYTES"
  [ "$got" = "$BYTES" ] || fail "received $got B of $BYTES"
  RX_Q=$q
}

t_zcrx_verify() { zcrx_case "$PORT" zcrx --rx zcrx --verify; }

t_zcrx_udmabuf() {
  need_iface
  need_local
  need_remote
  [ -e /dev/udmabuf ] || skip "no /dev/udmabuf here (CONFIG_UDMABUF): a dma-buf of host memory needs it"
  zcrx_case "$((PORT + 4))" zcrx --rx zcrx --mem udmabuf --verify
}

t_auto_iface() { zcrx_case "$((PORT + 5))" zcrx --rx auto --verify; }

# zcrx_case PORT WANT ARGS...: rx_case with ARGS; the receive must have used WANT, verified the
# pattern and received zero-copy.
zcrx_case() {
  local port=$1 want=$2 q drv=0
  shift 2
  drv_stats "$TW/drv-before.txt" && drv=1
  rx_case "$port" "$@"
  q=$RX_Q
  local f=$TW/recv.out rx ver zc cp un unk secs nm
  rx=$(py get "$f" last 'd["rx"]')
  ver=$(py get "$f" last 'd["verified"]')
  zc=$(py get "$f" last 'd["zerocopy_bytes"]')
  cp=$(py get "$f" last 'd["copied_bytes"]')
  un=$(py get "$f" last 'd["unsteered"]')
  unk=$(py get "$f" last 'd["unknown_copy_bytes"]')
  secs=$(py get "$f" last '"%.2f" % d["seconds"]')
  [ "$rx" = "$want" ] || fail "received with $rx, not $want"
  [ "$ver" = true ] || fail "recv did not verify the pattern"
  # Before Linux 7.2 the kernel keeps no zcrx statistics: zcnet counts a host area's bytes as
  # unknown (never zero-copy), and only the driver's per-queue counters can tell.
  if [ "${zc:-0}" -eq 0 ] && [ "${unk:-0}" -gt 0 ] && ! zcrx_feature stats; then
    { [ "$drv" = 1 ] && drv_stats "$TW/drv-after.txt"; } ||
      skip "$BYTES B verified on queue $q, but Linux $(uname -r) has no zcrx statistics (7.2 added them), so zcnet counts $unk B as unknown, and $T_IF's driver has no per-queue payload counters (ethtool -S) to tell"
    nm=$(drv_delta "$TW/drv-before.txt" "$TW/drv-after.txt" "$q" payload_netmem)
    [ "$nm" -ge "$unk" ] || fail "zcnet received $unk B (unknown: no zcrx statistics on Linux $(uname -r)), but the driver put only $nm B into queue $q's area"
    pass "$BYTES B verified on queue $q in $secs s: $unk B unknown to zcnet (Linux $(uname -r) has no zcrx statistics), $nm B written into the area by the driver (ethtool -S), $cp B copied; NIC restored"
  fi
  [ "${zc:-0}" -gt 0 ] || fail "zcrx received nothing zero-copy ($cp B copied, $un B unsteered: is the flow steered to queue $q?)"
  pass "$BYTES B verified on queue $q in $secs s: $zc B zero-copy, $cp B copied, $un B unsteered; NIC restored"
}

t_devmem_rx() {
  need_iface
  need_gpu
  local q
  rx_case "$((PORT + 1))" --rx devmem --mem "$DMEM"
  q=$RX_Q
  local path secs
  path=$(devmem_path "$TW/recv.out" rx)
  secs=$(py get "$TW/recv.out" last '"%.2f" % d["seconds"]')
  [ "$path" = devmem ] || fail "received into $DMEM by $path, not devmem"
  local dev
  dev=$(py get "$TW/recv.out" last 'd.get("device_bytes", -1)')
  [ "$dev" != 0 ] || fail "devmem received $BYTES B, none of them into $DMEM"
  pass "$BYTES B into $DMEM by devmem on queue $q in $secs s (count checked; payload not verified, see devmem-rx-verify); NIC restored"
}

t_devmem_rx_verify() {
  need_iface
  need_gpu
  local q
  rx_case "$((PORT + 2))" --rx devmem --mem "$DMEM" --verify
  q=$RX_Q
  local path ver
  path=$(devmem_path "$TW/recv.out" rx)
  ver=$(py get "$TW/recv.out" last 'd["verified"]')
  [ "$path" = devmem ] || fail "received into $DMEM by $path, not devmem"
  [ "$ver" = true ] || fail "recv did not verify the pattern"
  pass "$BYTES B verified in $DMEM by devmem on queue $q; NIC restored"
}

t_devmem_tx() {
  need_iface
  need_zcnet
  need_python
  need_gpu
  need_remote_v4
  need_remote
  local port=$((PORT + 3)) pid w src rrc line
  # The peer's command itself in the background (peer execs it), so that $! is it.
  peer recv --listen "$REMOTE_V4:$port" --verify --json >"$TW/recv.out" 2>"$TW/recv.err" &
  pid=$!
  echo "$pid" >>"$WORK/pids"
  wait_for "$TW/recv.err" "listening on" "$pid" 30
  w=$?
  if [ "$w" -ne 0 ]; then
    wait_bounded "$pid" 1
    fail "the peer's zcnet recv did not listen on $REMOTE_V4:$port: $(zline "$TW/recv.err")"
  fi
  timeout --foreground -s TERM "$TMO" "$ZCNET" send "$REMOTE_V4:$port" --tx devmem --mem "$DMEM" --verify \
    --bytes "$BYTES" --json >"$TW/send.out" 2>"$TW/send.err"
  src=$?
  # After a failed send the peer's receiver waits for a stream that will not come: stop the
  # ssh at once (the peer's `timeout` ends its zcnet within ZCNET_HW_TIMEOUT seconds).
  if [ "$src" -eq 0 ]; then wait_bounded "$pid" 30; else wait_bounded "$pid" 2; fi
  rrc=$?
  if [ "$src" -ne 0 ]; then
    line=$(zline "$TW/send.err")
    [ "$src" -ne 2 ] || fail "zcnet send exited 2 (bad arguments): $line"
    local v
    v=$(py verdict "$(probe_file)" "$T_IF" devmem-tx 2>/dev/null | cut -f1)
    case $line in
      *"netmem TX"* | *EOPNOTSUPP* | *"not supported"*)
        [ "$v" = zero-copy ] || skip "$T_IF cannot (probe: devmem-tx $v): $line" ;;
    esac
    fail "zcnet send --tx devmem exited $src: $line"
  fi
  [ "$rrc" -eq 0 ] || fail "the peer's zcnet recv exited $rrc: $(zline "$TW/recv.err")"
  local path sent got ver mbs
  path=$(devmem_path "$TW/send.out" tx)
  sent=$(py get "$TW/send.out" last 'd["bytes"]')
  mbs=$(py get "$TW/send.out" last '"%.0f" % d["mb_per_s"]')
  got=$(py get "$TW/recv.out" last 'd["bytes"]' 2>&1) || fail "the peer's recv JSON: $(one_line "$got")"
  ver=$(py get "$TW/recv.out" last 'd["verified"]')
  [ "$path" = devmem ] || fail "sent from $DMEM by $path, not devmem"
  [ "$sent" = "$BYTES" ] || fail "sent $sent B, not $BYTES"
  [ "$got" = "$BYTES" ] || fail "the peer received $got B of $BYTES"
  [ "$ver" = true ] || fail "the peer did not verify the pattern"
  pass "$BYTES B from $DMEM by devmem ($mbs MB/s), verified by the peer"
}

t_restore_after_kill() {
  need_iface
  need_zcnet
  need_python
  need_root "zcnet nic setup changes the NIC"
  local q pid w rc line nb d state undone
  q=$(pick_queue) || exit $?
  nb=$(snapshot "$TW/before.txt")
  mark_dirty
  # No --keep and no command: nic setup holds the setup until a signal.
  if [ -n "$T_NS" ]; then
    ip netns exec "$T_NS" "$ZCNET" nic setup --iface "$T_IF" --queue "$q" --port "$PORT" --json \
      >"$TW/setup.out" 2>"$TW/setup.err" &
  else
    "$ZCNET" nic setup --iface "$T_IF" --queue "$q" --port "$PORT" --json >"$TW/setup.out" 2>"$TW/setup.err" &
  fi
  pid=$!
  echo "$pid" >>"$WORK/pids"
  wait_for "$TW/setup.err" "holding the setup" "$pid" 30
  w=$?
  if [ "$w" -ne 0 ]; then
    [ "$w" -eq 2 ] && kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    rc=$?
    line=$(zline "$TW/setup.err")
    snapshot "$TW/after.txt" >/dev/null
    d=$(differs "$TW/before.txt" "$TW/after.txt")
    [ -z "$d" ] || fail "nic setup exited $rc ($line) and left the NIC changed: $d"
    unmark_dirty
    [ "$w" -ne 2 ] || fail "nic setup did not hold within 30 s: $line"
    [ "$rc" -ne 2 ] || fail "nic setup exited 2 (bad arguments): $line"
    refused "nic setup --queue $q" "$line"
  fi
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  run_in "$ZCNET" nic status --iface "$T_IF" --json >"$TW/status.json" 2>"$TW/status.err" ||
    fail "nic status after SIGKILL: $(zline "$TW/status.err")"
  state=$(py applied "$TW/status.json" "$T_IF")
  [ "$state" = dead ] || fail "after SIGKILL, nic status shows state files '$state' (want one, of a dead process)"
  run_in "$ZCNET" nic restore --iface "$T_IF" >"$TW/restore.out" 2>"$TW/restore.err" ||
    fail "nic restore after SIGKILL exited $?: $(zline "$TW/restore.err")"
  unmark_dirty
  undone=$(grep -c 'undid' "$TW/restore.out")
  snapshot "$TW/after.txt" >/dev/null
  d=$(differs "$TW/before.txt" "$TW/after.txt")
  [ -z "$d" ] || fail "state after nic restore differs from before: $d"
  pass "SIGKILLed nic setup (queue $q) while holding; nic restore undid $undone change(s); state equal to before ($nb lines compared)"
}

# zcrx's buffer size and copy accounting, and bench rx on the device: a file of their own.
# shellcheck source=hw-suite-zcrx.sh
. "$HERE/hw-suite-zcrx.sh"

# The fault tests: a file of their own.
# shellcheck source=hw-suite-faults.sh
. "$HERE/hw-suite-faults.sh"

t_nsim() {
  [ -n "$NSIM_IF" ] || skip "${NSIM_SKIP:-$NSIM_LINE}"
  T_IF=$NSIM_IF
  T_NS=$NSIM_NS
  T_LABEL=nsim
  T_PORTLESS=1
  "$@"
}

# ---------------------------------------------------------------------------------------------
# netdevsim: a device in a namespace of its own, for the tests that need no traffic.

selected() { [ -z "$ONLY" ] || case ",$ONLY," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

nsim_setup() {
  if ! selected nsim-probe && ! selected nsim-nic-setup-restore; then
    NSIM_LINE="netdevsim: not used (no nsim-* test selected)"
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    NSIM_LINE="netdevsim: not tried (creating a device needs root): nsim-* tests skipped"
    NSIM_SKIP="needs root (creating a netdevsim device)"
    return
  fi
  local why="" id dev n p
  if [ ! -e /sys/bus/netdevsim/new_device ]; then
    if has modprobe; then
      why=$(modprobe netdevsim 2>&1) || true
    else
      why="modprobe not found"
    fi
  fi
  if [ ! -e /sys/bus/netdevsim/new_device ]; then
    [ -n "$why" ] || why="modprobe netdevsim gave no device bus"
    if [ -r /proc/config.gz ] && has zcat && zcat /proc/config.gz 2>/dev/null | grep -q '^# CONFIG_NETDEVSIM is not set'; then
      why="CONFIG_NETDEVSIM is not set; $why"
    fi
    NSIM_LINE="netdevsim: not available on this kernel (no /sys/bus/netdevsim; $(one_line "$why")): nsim-* tests skipped"
    NSIM_SKIP="netdevsim not available on this kernel ($(one_line "$why"))"
    return
  fi
  NSIM_NS="zcnet-hw-$$-$RANDOM"
  if ! ip netns add "$NSIM_NS" 2>"$WORK/nsim.err"; then
    NSIM_LINE="netdevsim: cannot create namespace $NSIM_NS: $(zline "$WORK/nsim.err"): nsim-* tests skipped"
    NSIM_NS=""
    return
  fi
  for _ in 1 2 3 4 5; do
    id=$((20000 + RANDOM % 30000))
    if { echo "$id 1 4" >/sys/bus/netdevsim/new_device; } 2>/dev/null ||
      { echo "$id 1" >/sys/bus/netdevsim/new_device; } 2>/dev/null; then
      NSIM_ID=$id
      break
    fi
  done
  if [ -z "$NSIM_ID" ]; then
    NSIM_LINE="netdevsim: writing to /sys/bus/netdevsim/new_device failed: nsim-* tests skipped"
    return
  fi
  has udevadm && udevadm settle -t 5 2>/dev/null
  dev=""
  for _ in $(seq 1 50); do
    for p in "/sys/bus/netdevsim/devices/netdevsim$NSIM_ID/net/"*; do
      [ -e "$p" ] && dev=${p##*/} && break
    done
    [ -n "$dev" ] && break
    sleep 0.1
  done
  if [ -z "$dev" ] || ! ip link set "$dev" netns "$NSIM_NS" 2>"$WORK/nsim.err" ||
    ! ip -n "$NSIM_NS" link set "$dev" up 2>>"$WORK/nsim.err"; then
    NSIM_LINE="netdevsim: device $NSIM_ID has no usable netdev (${dev:-none}: $(zline "$WORK/nsim.err")): nsim-* tests skipped"
    return
  fi
  ip -n "$NSIM_NS" link set lo up 2>/dev/null
  n=$(ip netns exec "$NSIM_NS" sh -c "ls -d /sys/class/net/$dev/queues/rx-* 2>/dev/null | wc -l")
  NSIM_IF=$dev
  NSIM_LINE="netdevsim: device $NSIM_ID ($dev, $n RX queue(s)) in namespace $NSIM_NS"
}

# ---------------------------------------------------------------------------------------------
# Run.

R_NAME=()
R_RES=()
R_SECS=()
R_DETAIL=()

run_test() {
  local name=$1 rc t0 t1 res detail
  shift
  selected "$name" || return 0
  progress "$name ..."
  rm -f "$DETAIL_FILE"
  TW=$WORK/t-$name
  mkdir -p "$TW"
  t0=$(now)
  # In a process group of its own (set -m), so that an interrupt of the suite can stop
  # everything the test runs with one signal; `wait` lets the suite's trap run at once.
  set -m
  (
    T_IF=$IFACE
    T_NS=""
    T_LABEL=hw
    T_PORTLESS=0
    "$@"
  ) </dev/null >&2 &
  TPID=$!
  set +m
  wait "$TPID"
  rc=$?
  TPID=""
  t1=$(now)
  detail=""
  [ -f "$DETAIL_FILE" ] && detail=$(one_line "$(cat "$DETAIL_FILE")")
  case $rc in
    0) res=pass ;;
    77) res=skip ;;
    *) res=fail ;;
  esac
  [ -n "$detail" ] || detail="(the test exited $rc without a reason)"
  if compgen -G "$WORK/dirty-*" >/dev/null; then
    if restore_dirty; then
      detail="$detail (the suite then ran zcnet nic restore)"
    else
      detail="$detail (zcnet nic restore afterwards failed too: the NIC may still be set up)"
      res=fail
    fi
  fi
  R_NAME+=("$name")
  R_RES+=("$res")
  R_SECS+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
  R_DETAIL+=("$detail")
  progress "$name: $res: $detail"
}

KERNEL=$(uname -r)
DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ZVER="n/a"
if [ -z "$ZCNET_WHY" ]; then
  ZVER=$("$ZCNET" --version 2>/dev/null | head -n 1)
  [ -n "$ZVER" ] || ZVER="(zcnet --version failed)"
fi
GITREV=""
if has git && git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
  GITREV=$(git -C "$REPO" describe --always --dirty 2>/dev/null)
fi
DRIVER=""
if [ -n "$IFACE" ]; then
  if has ethtool && DRIVER=$(ethtool -i "$IFACE" 2>/dev/null); then
    DRIVER=$(printf '%s\n' "$DRIVER" | grep -E '^(driver|version|firmware-version|bus-info):' | tr '\n' ',' | sed -e 's/,$//' -e 's/,/, /g')
  elif [ -e "/sys/class/net/$IFACE/device/driver" ]; then
    DRIVER="driver: $(basename "$(readlink "/sys/class/net/$IFACE/device/driver")") (ethtool not installed)"
  elif [ -e "/sys/class/net/$IFACE" ]; then
    DRIVER="no device driver (a software interface; ethtool not installed)"
  else
    DRIVER="no interface named $IFACE here"
  fi
fi

REMOTE_WHY=""
REMOTE_INFO="n/a (ZCNET_HW_REMOTE_SSH not set)"
if [ -n "$REMOTE_NETNS" ]; then
  REMOTE_INFO="network namespace $REMOTE_NETNS on this host (the same zcnet)"
elif [ -n "$REMOTE_SSH" ]; then
  peer_wanted=0
  for t in zcrx-verify zcrx-udmabuf auto-iface devmem-rx devmem-rx-verify devmem-tx $FAULT_PEER_TESTS zcrx-bufsize zcrx-copies; do
    selected "$t" && peer_wanted=1
  done
  if [ "$peer_wanted" = 1 ]; then
    if ! has ssh; then
      REMOTE_WHY="ssh not installed"
    elif out=$(timeout 30 ssh "${SSH_OPTS[@]}" "$REMOTE_SSH" "$REMOTE_ZCNET --version" 2>&1); then
      REMOTE_INFO="$REMOTE_SSH ($(one_line "$(printf '%s\n' "$out" | tail -n 1)"))"
    else
      REMOTE_WHY="ssh $REMOTE_SSH '$REMOTE_ZCNET --version' failed: $(one_line "$(printf '%s\n' "$out" | tail -n 2)")"
    fi
    [ -z "$REMOTE_WHY" ] || REMOTE_INFO="$REMOTE_SSH: $REMOTE_WHY"
  else
    REMOTE_INFO="$REMOTE_SSH (not contacted: no two-host test selected)"
  fi
fi

nsim_setup
progress "$NSIM_LINE"

run_test probe t_probe
run_test nic-setup-restore t_nic_setup_restore
run_test zcrx-verify t_zcrx_verify
run_test zcrx-udmabuf t_zcrx_udmabuf
run_test auto-iface t_auto_iface
run_test devmem-rx t_devmem_rx
run_test devmem-rx-verify t_devmem_rx_verify
run_test devmem-tx t_devmem_tx
run_test restore-after-kill t_restore_after_kill
run_test zcrx-bufsize t_zcrx_bufsize
run_test zcrx-copies t_zcrx_copies
run_test bench-rx t_bench_rx
run_test zcrx-killed t_zcrx_killed
run_test devmem-killed t_devmem_killed
run_test devmem-tokens t_devmem_tokens
run_test peer-reset t_peer_reset
run_test two-receivers t_two_receivers
run_test setup-killed t_setup_killed
run_test lib-zcrx t_lib_zcrx
run_test lib-devmem t_lib_devmem
run_test c-zcrx t_c_zcrx
run_test c-zcrx-udmabuf t_c_zcrx_udmabuf
run_test c-devmem t_c_devmem
run_test py-zcrx t_py_zcrx
run_test py-devmem t_py_devmem
run_test nsim-probe t_nsim t_probe
run_test nsim-nic-setup-restore t_nsim t_nic_setup_restore

npass=0 nfail=0 nskip=0
for r in "${R_RES[@]}"; do
  case $r in pass) npass=$((npass + 1)) ;; fail) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
done

ENV_VARS="ZCNET_HW_IFACE ZCNET_HW_QUEUE ZCNET_HW_LOCAL_V4 ZCNET_HW_REMOTE_V4 ZCNET_HW_REMOTE_SSH ZCNET_HW_REMOTE_ZCNET ZCNET_HW_REMOTE_NETNS ZCNET_HW_GPU ZCNET_HW_MEM ZCNET_HW_SETTLE ZCNET_HW_PORT ZCNET_HW_BYTES ZCNET_HW_TIMEOUT ZCNET ZCNET_STATE_DIR ZCNET_HW_BINDINGS"
if [ "$JSON" = 1 ]; then
  {
    printf '{"suite": "zcnet-hw", "date": %s, "kernel": %s, "iface": %s, "driver": %s,\n' \
      "$(json_str "$DATE")" "$(json_str "$KERNEL")" "$(json_str "$IFACE")" "$(json_str "$DRIVER")"
    printf ' "zcnet": %s, "zcnet_path": %s, "git": %s, "remote": %s, "netdevsim": %s,\n' \
      "$(json_str "$ZVER")" "$(json_str "${ZCNET:-}")" "$(json_str "$GITREV")" "$(json_str "$REMOTE_INFO")" "$(json_str "$NSIM_LINE")"
    printf ' "env": {'
    sep=""
    for v in $ENV_VARS; do
      if [ -n "${!v+x}" ]; then printf '%s"%s": %s' "$sep" "$v" "$(json_str "${!v}")"; else printf '%s"%s": null' "$sep" "$v"; fi
      sep=", "
    done
    printf '},\n "results": ['
    sep=""
    for i in "${!R_NAME[@]}"; do
      printf '%s\n  {"test": %s, "result": "%s", "seconds": %s, "detail": %s}' "$sep" \
        "$(json_str "${R_NAME[$i]}")" "${R_RES[$i]}" "${R_SECS[$i]}" "$(json_str "${R_DETAIL[$i]}")"
      sep=","
    done
    printf '\n ],\n "passed": %d, "failed": %d, "skipped": %d}\n' "$npass" "$nfail" "$nskip"
  }
else
  envs=""
  for v in $ENV_VARS; do
    if [ -n "${!v+x}" ]; then envs+="${envs:+ }$v=${!v}"; fi
  done
  echo "### zcnet hardware suite"
  echo
  echo "- date: $DATE"
  echo "- kernel: $KERNEL"
  echo "- interface: ${IFACE:-(ZCNET_HW_IFACE not set)}${DRIVER:+; $DRIVER}"
  echo "- zcnet: $ZVER${GITREV:+ (git $GITREV)}${ZCNET:+ at $ZCNET}"
  echo "- remote: $REMOTE_INFO"
  echo "- $NSIM_LINE"
  echo "- env: ${envs:-(no ZCNET_HW_* set)}"
  echo
  echo "| test | result | seconds | detail |"
  echo "| --- | --- | --- | --- |"
  for i in "${!R_NAME[@]}"; do
    d=${R_DETAIL[$i]//|/\\|}
    echo "| ${R_NAME[$i]} | ${R_RES[$i]} | ${R_SECS[$i]} | $d |"
  done
  echo
  echo "$npass passed, $nfail failed, $nskip skipped"
fi
[ "$nfail" -eq 0 ]
