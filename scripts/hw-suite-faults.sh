#!/usr/bin/env bash
# zcnet's NIC suite, the fault cases: sourced by scripts/hw-suite.sh (its helpers, variables and
# run_test), not run on its own. Each test meets one of the kernel's fault paths on the device
# under test and checks what the kernel shows afterwards (netdev netlink's queue and page-pool
# bindings through `zcnet probe`, the suite's NIC snapshot, the driver module's reference count),
# not only zcnet's exit status:
#
#   zcrx-killed, devmem-killed  a receiver SIGKILLed mid-stream while it holds buffers (stopped
#                               first, so that what it was lent stays lent): the kernel lets go of
#                               the area or binding, `nic restore` undoes the setup it left
#   devmem-tokens               devmem into a dma-buf of 64 pages: the provider runs dry again
#                               and again; the stream must still complete, every byte checked
#   peer-reset                  the sender killed mid-stream (FIN) and reset (SO_LINGER 0, RST):
#                               recv exits 1 with its one line; NIC restored, area released
#   two-receivers               a second receiver on a queue that has a zcrx area (and a devmem
#                               binding): refused in one line naming the queue, the first unharmed
#   setup-killed                `nic setup` SIGKILLed between each two of its steps (strace holds
#                               it at the state file's Nth fdatasync); `nic restore` then returns
#                               the device to exactly what it was
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "hw-suite-faults.sh is part of scripts/hw-suite.sh, which sources it: run scripts/hw-suite.sh --only zcrx-killed (see its --help)" >&2
  exit 2
fi

# A line of progress on the suite's stderr (a guest's console shows where a slow test is).
fnote() { echo "hw-suite: ${FUNCNAME[1]#t_}: $*" >&2; }

# The fault tests' ports: PORT+10 and on (the other tests use PORT to PORT+5).
FPORT=$((PORT + 10))

# The bytes waiting unread in the established TCP connection to local port $1 (its Recv-Q, which
# ss reads from /proc/net/tcp where the kernel has no sock_diag), empty without one.
recv_q() {
  ss -Htn state established "( sport = :$1 )" 2>/dev/null | awk 'NR == 1 { print $1 }'
}

# Waits until port $1 has an established connection (0), PID $2 exits (1) or $3 s pass (2).
wait_established() {
  local n=$(($3 * 10))
  while [ "$n" -gt 0 ]; do
    [ -n "$(recv_q "$1")" ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
    n=$((n - 1))
  done
  return 2
}

# The memory-provider bindings the kernel lists for T_IF (netdev netlink queue-get and
# page-pool-get, as `zcnet probe` reports them), one a line; exit 1 with the reason.
kbindings() {
  run_in "$ZCNET" probe --iface "$T_IF" --json >"$TW/kb.json" 2>"$TW/kb.err" || {
    echo "zcnet probe failed: $(zline "$TW/kb.err")"
    return 1
  }
  py get "$TW/kb.json" doc "'\n'.join(b for i in d['interfaces'] if i['name'] == '$T_IF' for b in (i.get('bindings') or []))"
}

# The reference count of T_IF's driver module (/sys/module/DRIVER/refcnt), "-" for a driver built
# into the kernel.
mod_refcnt() {
  local drv
  drv=$(run_in ethtool -i "$T_IF" 2>/dev/null | sed -n 's/^driver: //p')
  if [ -n "$drv" ] && [ -r "/sys/module/$drv/refcnt" ]; then cat "/sys/module/$drv/refcnt"; else echo -; fi
}

# Python on the peer (ssh, or its namespace): python3 -c $1 with the other arguments.
peer_py() {
  local code=$1
  shift
  if [ -n "$REMOTE_NETNS" ]; then
    exec ip netns exec "$REMOTE_NETNS" timeout "$TMO" "${PYTHON:-python3}" -c "$code" "$@" </dev/null
  fi
  # shellcheck disable=SC2029 # the command is built (and quoted) here on purpose
  exec ssh "${SSH_OPTS[@]}" "$REMOTE_SSH" "timeout $TMO python3 -c $(printf '%q' "$code") $(printf '%q ' "$@")"
}

# The faulty peer: connects to $1:$2, sends $3 zero bytes, waits half a second for them to be
# delivered, then ends as $4 says: "kill" (SIGKILLs itself: its socket closes with a FIN) or
# "rst" (SO_LINGER 0, then close: a RST). Prints the bytes it sent.
FAULTY_PEER='
import os, signal, socket, struct, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
n, sent, buf = int(sys.argv[3]), 0, bytes(65536)
while sent < n:
    sent += s.send(buf[: min(len(buf), n - sent)])
print(sent, flush=True)
time.sleep(0.5)
if sys.argv[4] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
'


# nic setup --keep for queue $1 and port $2 (the suite's cleanup restores it if the test does
# not). A refusal that changed nothing is the suite's refusal verdict.
# kept_receiver PORT Q ARGS...: zcnet recv with ARGS on queue Q, set up by setup_keep, in the
# background (its pid in RX_PID), once it listens; if it does not, the device is restored and the
# test fails (no listener within 60 s) or is a refusal (recv exited with the kernel's answer).
kept_receiver() {
  local port=$1 q=$2 w
  shift 2
  "$ZCNET" recv --listen "$LOCAL_V4:$port" --iface "$T_IF" --queue "$q" --json "$@" >"$TW/recv.out" 2>"$TW/recv.err" &
  RX_PID=$!
  echo "$RX_PID" >>"$WORK/pids"
  wait_for "$TW/recv.err" "listening on" "$RX_PID" 60
  w=$?
  if [ "$w" -ne 0 ]; then
    kill -KILL "$RX_PID" 2>/dev/null
    wait "$RX_PID"
    restore_and_compare
    [ "$w" -eq 2 ] && fail "zcnet recv did not listen within 60 s: $(zline "$TW/recv.err")"
    refused "recv $*" "$(zline "$TW/recv.err")"
  fi
}

setup_keep() {
  local rc
  mark_dirty
  run_in "$ZCNET" nic setup --iface "$T_IF" --queue "$1" --port "$2" --keep --json >"$TW/setup.out" 2>"$TW/setup.err"
  rc=$?
  [ "$rc" -eq 0 ] || setup_refused "$rc" "$TW/setup.err" "$1"
}

# nic setup exited $1 (not 0), its stderr in $2, for queue $3: fails when it left the NIC
# changed, else the suite's refusal verdict.
setup_refused() {
  local line d
  line=$(zline "$2")
  snapshot "$TW/after.txt" >/dev/null
  d=$(differs "$TW/before.txt" "$TW/after.txt")
  [ -z "$d" ] || fail "nic setup exited $1 ($line) and left the NIC changed: $d"
  unmark_dirty
  [ "$1" -ne 2 ] || fail "nic setup exited 2 (bad arguments): $line"
  refused "nic setup --queue $3" "$line"
}

# nic restore of T_IF, then the state compared with before.txt once the kernel has let go;
# RESTORE_NOTE says how it went. Fails the test when the state differs.
restore_and_compare() {
  local rc t0 t1
  t0=$SECONDS
  run_in "$ZCNET" nic restore --iface "$T_IF" >"$TW/restore.out" 2>"$TW/restore.err"
  rc=$?
  t1=$SECONDS
  [ "$rc" -eq 0 ] || fail "nic restore exited $rc after $((t1 - t0)) s: $(zline "$TW/restore.err")"
  unmark_dirty
  settled_snapshot "$TW/after.txt" "$TW/before.txt"
  local d
  d=$(differs "$TW/before.txt" "$TW/after.txt")
  [ -z "$d" ] || fail "state after nic restore differs from before (after waiting ${SETTLED_WAIT} s): $d"
  fnote "nic restore: $((t1 - t0)) s; settled in $SETTLED_WAIT s"
  RESTORE_NOTE="nic restore undid $(grep -c undid "$TW/restore.out") change(s) in $((t1 - t0)) s"
}

# A receiver (`zcnet recv` with $2...) on a set-up queue, stopped mid-stream and SIGKILLed; $1 the
# port. Passes when the kernel let go of its memory, nic restore brought the device back and the
# driver module's reference count is what it was.
killed_case() {
  local port=$1
  shift
  need_rx_peer
  local q pid spid w during r0 r1 got last held
  q=$(pick_queue) || exit $?
  snapshot_before "$TW/before.txt" >/dev/null
  r0=$(mod_refcnt)
  setup_keep "$q" "$port"
  kept_receiver "$port" "$q" "$@"
  pid=$RX_PID
  # A stream far longer than the test: the receiver dies in its middle.
  (peer send "$LOCAL_V4:$port" --verify --bytes $((BYTES * 64)) --json) >"$TW/send.out" 2>"$TW/send.err" &
  spid=$!
  echo "$spid" >>"$WORK/pids"
  wait_established "$port" "$pid" 60
  w=$?
  [ "$w" -eq 0 ] && sleep 2 && ! kill -0 "$pid" 2>/dev/null && w=1
  if [ "$w" -ne 0 ]; then
    kill -KILL "$pid" "$spid" 2>/dev/null
    wait "$pid" "$spid"
    restore_and_compare
    fail "the stream did not run (recv: $(zline "$TW/recv.err"); peer: $(zline "$TW/send.err"))"
  fi
  during=$(kbindings) || fail "$during"
  grep -q "^rx queue $q: " <<<"$during" || fail "mid-stream the kernel lists no binding of queue $q: $(one_line "$during")"
  # Stopped, it takes and returns nothing more: what it was lent stays lent, and what arrives
  # waits in its socket, in buffers of its area (or binding), until the window closes.
  kill -STOP "$pid"
  last=-1 got=$(recv_q "$port")
  for _ in $(seq 1 50); do
    [ "$got" = "$last" ] && break
    sleep 0.2
    last=$got got=$(recv_q "$port")
  done
  held=${got:-0}
  [ "$held" -gt 0 ] || fail "stopped mid-stream, the receiver's socket holds nothing (Recv-Q ${got:-none}): no data was flowing"
  fnote "stopped with $held B unread in its socket; SIGKILL"
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null
  # The peer's send meets the reset of the killed receiver's socket.
  wait_bounded "$spid" 30 >/dev/null
  # What a user does next: nic restore at once (it waits a little for the kernel to let go of
  # the queue); then the state must come back to before, bindings and page pools included.
  restore_and_compare
  r1=$(mod_refcnt)
  [ "$r1" = "$r0" ] || fail "the driver module's refcnt is $r1 after the test, $r0 before"
  pass "SIGKILLed with $held B unread in its socket on queue $q ($(grep -c . <<<"$during") binding(s) listed mid-stream); $RESTORE_NOTE; state equal to before (bindings gone) after ${SETTLED_WAIT} s; module refcnt $r0 -> $r1"
}

t_zcrx_killed() { killed_case "$FPORT" --rx zcrx; }

t_devmem_killed() {
  need_gpu
  killed_case "$((FPORT + 1))" --rx devmem --mem "$DMEM"
}

# devmem into a dma-buf of 64 pages: the binding runs dry whenever more is in flight than that
# (the window is larger), the driver's allocations fail and it drops; TCP sends again once tokens
# are back. (zcrx with a small area is scripts/hw-suite-zcrx.sh's zcrx-copies.)
t_devmem_tokens() {
  need_gpu
  [ "$MEM" = udmabuf ] || skip "needs ZCNET_HW_MEM=udmabuf (the dma-buf's size is --area)"
  local q f=$TW/recv.out rx ver dev lin secs drv=0 af nm counters="the driver has no per-queue counters (ethtool -S rxN_alloc_fail)"
  drv_stats "$TW/drv-0.txt" && drv=1
  rx_case "$((FPORT + 2))" --rx devmem --mem udmabuf --area 256K --verify
  q=$RX_Q
  rx=$(py get "$f" last 'd["rx"]')
  ver=$(py get "$f" last 'd["verified"]')
  dev=$(py get "$f" last 'd["device_bytes"]')
  lin=$(py get "$f" last 'd["linear_fallbacks"]')
  secs=$(py get "$f" last '"%.2f" % d["seconds"]')
  [ "$rx" = devmem ] || fail "received with $rx, not devmem"
  [ "$ver" = true ] || fail "recv did not verify the pattern"
  [ "${dev:-0}" -gt 0 ] || fail "none of the $BYTES B landed in the dma-buf"
  if [ "$drv" = 1 ]; then
    drv_stats "$TW/drv-1.txt" || fail "ethtool -S $T_IF stopped working"
    af=$(drv_delta "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" alloc_fail)
    nm=$(drv_delta "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" payload_netmem)
    [ "$af" -gt 0 ] || fail "the 256 KiB dma-buf never ran dry (no allocation failure on queue $q): nothing was tested"
    counters="the driver's allocations on queue $q failed $af times (dropped, sent again), $nm B written into the dma-buf"
  fi
  pass "$BYTES B verified through a 256 KiB dma-buf on queue $q in $secs s: $dev B in device memory, $lin linear fallback(s); $counters; NIC restored"
}

t_peer_reset() {
  need_rx_peer
  local port=$((FPORT + 4)) q how pid ppid rc sent got line d notes=""
  q=$(pick_queue) || exit $?
  snapshot_before "$TW/before.txt" >/dev/null
  for how in kill rst; do
    mark_dirty
    timeout --foreground -s TERM "$((TMO + 30))" "$ZCNET" nic setup --iface "$T_IF" --queue "$q" --port "$port" --json -- \
      "$ZCNET" recv --listen "$LOCAL_V4:$port" --iface "$T_IF" --queue "$q" --rx zcrx --bytes "$((BYTES * 4))" --json \
      >"$TW/recv-$how.out" 2>"$TW/recv-$how.err" &
    pid=$!
    echo "$pid" >>"$WORK/pids"
    wait_for "$TW/recv-$how.err" "listening on" "$pid" 60 || {
      kill -TERM "$pid" 2>/dev/null
      wait "$pid"
      restore_dirty >/dev/null 2>&1
      fail "zcnet recv did not listen: $(zline "$TW/recv-$how.err")"
    }
    # A subshell around the one that becomes the peer: the peer dies by SIGKILL, and bash
    # would report that of a job of its own on the suite's stderr.
    ( (peer_py "$FAULTY_PEER" "$LOCAL_V4" "$port" "$BYTES" "$how"); exit $?) >"$TW/peer-$how.out" 2>"$TW/peer-$how.err" &
    ppid=$!
    echo "$ppid" >>"$WORK/pids"
    wait_bounded "$pid" "$TMO"
    rc=$?
    wait_bounded "$ppid" 10 >/dev/null 2>&1
    line=$(zline "$TW/recv-$how.err")
    fnote "$how: recv exited $rc: $line"
    sent=$(head -n 1 "$TW/peer-$how.out")
    [ -n "$sent" ] || fail "the peer ($how) sent nothing: $(zline "$TW/peer-$how.err")"
    [ "$rc" -eq 1 ] || fail "after the peer's $how, recv exited $rc (want 1): $line"
    got=$(py get "$TW/recv-$how.out" last 'd["bytes"]' 2>&1) || fail "after the peer's $how, no recv JSON: $(one_line "$got")"
    case $how in
      kill)
        [ "$got" = "$sent" ] || fail "the killed peer sent $sent B, recv reports $got B"
        case $line in *"cut short"*) ;; *) fail "after the peer was killed, recv said: $line (want 'cut short')" ;; esac
        ;;
      rst)
        [ "$got" -le "$sent" ] || fail "the peer sent $sent B, recv reports $got B"
        case $line in *"reset by the peer"*) ;; *) fail "after the peer's RST, recv said: $line (want 'reset by the peer')" ;; esac
        ;;
    esac
    # nic setup restored the NIC when recv exited; the kernel lets go of the area after.
    settled_snapshot "$TW/after.txt" "$TW/before.txt"
    d=$(differs "$TW/before.txt" "$TW/after.txt")
    [ -z "$d" ] || fail "after the peer's $how, the NIC was not restored (after waiting ${SETTLED_WAIT} s): $d"
    unmark_dirty
    notes+="${notes:+; }$how: $got of $sent B then exit 1 ($line), restored and released in ${SETTLED_WAIT} s"
  done
  pass "queue $q: $notes"
}

t_two_receivers() {
  need_rx_peer
  local port=$((FPORT + 5)) q pid w rc line lines="" m zc ver got src
  q=$(pick_queue) || exit $?
  snapshot_before "$TW/before.txt" >/dev/null
  setup_keep "$q" "$port"
  kept_receiver "$port" "$q" --rx zcrx --verify
  pid=$RX_PID
  # A second receiver of each kind on the same queue: refused before it listens.
  for m in zcrx ${DMEM:+devmem}; do
    local args=(--rx "$m")
    [ "$m" = devmem ] && args+=(--mem "$DMEM")
    timeout -s KILL 60 "$ZCNET" recv --listen "$LOCAL_V4:$((port + 1))" --iface "$T_IF" --queue "$q" "${args[@]}" \
      >"$TW/second-$m.out" 2>"$TW/second-$m.err"
    rc=$?
    line=$(zline "$TW/second-$m.err")
    [ "$rc" -eq 1 ] || fail "a second --rx $m receiver on queue $q exited $rc (want 1): $line"
    [ "$(grep -c . "$TW/second-$m.err")" -eq 1 ] || fail "the second --rx $m receiver printed $(grep -c . "$TW/second-$m.err") lines, not one: $(one_line "$(cat "$TW/second-$m.err")")"
    case $line in
      *"queue $q"*"already has a memory provider"*"another --queue"*) ;;
      *) fail "the second --rx $m receiver's refusal does not name queue $q, the cause and the fix: $line" ;;
    esac
    lines+="${lines:+; }$m refused: $line"
  done
  kill -0 "$pid" 2>/dev/null || fail "the first receiver exited when the second was refused: $(zline "$TW/recv.err")"
  (peer send "$LOCAL_V4:$port" --verify --bytes "$BYTES" --json) >"$TW/send.out" 2>"$TW/send.err"
  src=$?
  if [ "$src" -eq 0 ]; then wait_bounded "$pid" 30; else wait_bounded "$pid" 2; fi
  rc=$?
  [ "$src" -eq 0 ] || fail "peer's send to the first receiver exited $src: $(zline "$TW/send.err")"
  [ "$rc" -eq 0 ] || fail "the first receiver exited $rc: $(zline "$TW/recv.err")"
  got=$(py get "$TW/recv.out" last 'd["bytes"]')
  ver=$(py get "$TW/recv.out" last 'd["verified"]')
  zc=$(py get "$TW/recv.out" last 'd["zerocopy_bytes"]')
  [ "$got" = "$BYTES" ] && [ "$ver" = true ] && [ "${zc:-0}" -gt 0 ] ||
    fail "the first receiver got $got B (verified $ver, $zc B zero-copy), not $BYTES B verified zero-copy"
  restore_and_compare
  pass "queue $q: $lines; the first receiver then verified $BYTES B ($zc B zero-copy); $RESTORE_NOTE"
}

t_setup_killed() {
  need_iface
  need_zcnet
  need_python
  need_root "zcnet nic setup changes the NIC"
  has strace || skip "needs strace (it holds nic setup between two of its steps)"
  local q k sp zp n rc recs file state done_steps=0 notes="" dir=${ZCNET_STATE_DIR:-/run/zcnet}
  q=$(pick_queue) || exit $?
  snapshot_before "$TW/before.txt" >/dev/null
  # fdatasync 1 is the state file's header; then each change is a pending record (synced before
  # the change is made) and a done record. Held at sync K, the file has K-1 records.
  for k in 2 3 4 5 6 7 8 9 10 11; do
    mark_dirty
    strace -f -qq -o /dev/null -e trace=fdatasync -e inject=fdatasync:delay_enter=60000000:when=$k \
      "$ZCNET" nic setup --iface "$T_IF" --queue "$q" --port "$((FPORT + 7))" --keep --json \
      >"$TW/setup-$k.out" 2>"$TW/setup-$k.err" &
    sp=$!
    echo "$sp" >>"$WORK/pids"
    recs=0 zp=""
    for _ in $(seq 1 300); do
      file=$(ls "$dir"/nic-*-"$T_IF".state 2>/dev/null | head -n 1)
      [ -n "$file" ] && recs=$(grep -cE '^(pending|done) ' "$file")
      [ "$recs" -ge $((k - 1)) ] && break
      kill -0 "$sp" 2>/dev/null || break
      sleep 0.1
    done
    if ! kill -0 "$sp" 2>/dev/null; then
      # nic setup finished before sync K: every step has been stopped after (or it was
      # refused: the suite's verdict on a refusal that changed nothing).
      wait "$sp"
      rc=$?
      [ "$rc" -eq 0 ] || setup_refused "$rc" "$TW/setup-$k.err" "$q"
      restore_and_compare
      break
    fi
    [ "$recs" -ge $((k - 1)) ] || fail "nic setup under strace wrote $recs record(s) in 30 s, not $((k - 1))"
    zp=$(pgrep -P "$sp" | head -n 1)
    [ -n "$zp" ] || fail "no zcnet process under strace"
    fnote "SIGKILL at record $((k - 1)): $(tail -n 1 "$file" | cut -c1-60)"
    kill -KILL "$zp"
    wait "$sp" 2>/dev/null
    run_in "$ZCNET" nic status --iface "$T_IF" --json >"$TW/status.json" 2>"$TW/status.err" ||
      fail "nic status after SIGKILL at record $((k - 1)): $(zline "$TW/status.err")"
    state=$(py applied "$TW/status.json" "$T_IF")
    [ "$state" = dead ] || fail "after SIGKILL at record $((k - 1)), nic status shows state files '$state' (want one, of a dead process)"
    n=$(tail -n 1 "$file" 2>/dev/null | cut -d' ' -f1-2)
    restore_and_compare
    done_steps=$((done_steps + 1))
    notes+="${notes:+, }$n"
  done
  [ "$done_steps" -ge 2 ] || fail "nic setup was stopped at only $done_steps point(s)"
  pass "queue $q: SIGKILLed at $done_steps points (last record: $notes); nic restore each time gave the state before"
}
