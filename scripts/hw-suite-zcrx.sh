#!/usr/bin/env bash
# zcnet's NIC suite, the zcrx buffer and copy tests and the receive benchmark: sourced by
# scripts/hw-suite.sh (its helpers, variables and run_test), not run on its own.
#
#   zcrx-bufsize   recv --rx zcrx --rx-buf-len 64K into an area of reserved 2 MiB huge pages:
#                  every byte verified and zero-copy; on a driver with per-queue payload
#                  counters (the software NIC, kmod/zcnic) they must show the payload in the
#                  provider's buffers at more than a page per buffer. Skips, naming the kernel,
#                  where the zcrx query lacks rx-buf-len (6.18), and without free huge pages.
#   zcrx-copies    zcnet's split of received bytes into zero-copy and copied, checked against
#                  what the kernel and the driver count: (a) an area of a few pages, which
#                  runs dry (the driver's buffer allocations fail; the kernel drops, it does
#                  not copy), and (b) a flow steered to another queue than the one zcrx is
#                  bound to (the kernel copies every byte into the area: io_zcrx_copy_frag).
#   bench-rx       zcnet bench rx --iface on the device, clients in the peer's namespace: the
#                  zcrx and devmem rows must each have moved their bytes by that mechanism.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "hw-suite-zcrx.sh is part of scripts/hw-suite.sh, which sources it: run scripts/hw-suite.sh --only zcrx-bufsize (see its --help)" >&2
  exit 2
fi

# These tests' ports: PORT+6 to PORT+9 (the others use PORT to PORT+5 and PORT+10 on).
ZPORT=$((PORT + 6))

# The driver's per-queue payload counters (ethtool -S: rxN_payload_netmem, rxN_payload_page,
# rxN_payload_linear, rxN_netmem_bufs, rxN_alloc_fail; kmod/zcnic has them) into FILE; fails
# (1) where the driver has none.
drv_stats() {
  has ethtool || return 1
  run_in ethtool -S "$T_IF" >"$1" 2>/dev/null || return 1
  grep -q 'rx[0-9]*_payload_netmem:' "$1"
}

# drv_delta BEFORE AFTER QUEUE NAME: how much rxQUEUE_NAME grew.
drv_delta() {
  local a b
  a=$(sed -n "s/^[[:space:]]*rx$3_$4: *\([0-9]*\).*/\1/p" "$1")
  b=$(sed -n "s/^[[:space:]]*rx$3_$4: *\([0-9]*\).*/\1/p" "$2")
  echo $((${b:-0} - ${a:-0}))
}

# drv_delta_others BEFORE AFTER QUEUE NAME: the growth of rxN_NAME summed over every queue but QUEUE.
drv_delta_others() {
  local n q sum=0
  n=$(grep -c '^[[:space:]]*rx[0-9]*_payload_netmem:' "$2")
  for ((q = 0; q < n; q++)); do
    [ "$q" = "$3" ] && continue
    sum=$((sum + $(drv_delta "$1" "$2" "$q" "$4")))
  done
  echo "$sum"
}

# Whether this kernel's zcrx query lists FEATURE (zcnet probe).
zcrx_feature() {
  local f
  f=$(probe_file) || fail "zcnet probe --iface $T_IF failed: $(zline "$WORK/probe-$T_LABEL.err")"
  [ "$(py get "$f" doc "'$1' in d['kernel']['zcrx_query']['zcrx_features']")" = true ]
}

# The recv JSON's split: sets R_ZC, R_CP, R_UN, R_VER, R_RX, R_SECS, R_STARVED.
recv_split() {
  local f=$TW/recv.out
  R_RX=$(py get "$f" last 'd["rx"]')
  R_VER=$(py get "$f" last 'd["verified"]')
  R_ZC=$(py get "$f" last 'd["zerocopy_bytes"]')
  R_CP=$(py get "$f" last 'd["copied_bytes"]')
  R_UN=$(py get "$f" last 'd["unknown_copy_bytes"]')
  R_STARVED=$(py get "$f" last 'd["starved"]')
  R_SECS=$(py get "$f" last '"%.2f" % d["seconds"]')
  [ "$R_RX" = zcrx ] || fail "received with $R_RX, not zcrx"
  [ "$R_VER" = true ] || fail "recv did not verify the pattern"
  [ $((R_ZC + R_CP + R_UN)) -eq "$BYTES" ] ||
    fail "zero-copy $R_ZC B + copied $R_CP B + unknown $R_UN B is not the $BYTES B received"
}

t_zcrx_bufsize() {
  need_iface
  need_zcnet
  need_python
  local len=65536 area=$((16 << 20)) q free need kern
  kern="Linux $(uname -r)"
  zcrx_feature rx-buf-len ||
    skip "$kern: its zcrx query does not list rx-buf-len (ZCRX_FEATURE_RX_PAGE_SIZE, Linux 7.0): buffers larger than a page cannot be asked for"
  need=$((area / (2 << 20)))
  free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)
  [ "${free:-0}" -ge "$need" ] ||
    skip "needs $need free 2 MiB huge pages for a $((area >> 20)) MiB area, ${free:-0} free (sysctl vm.nr_hugepages=$need)"
  local drv=0
  drv_stats "$TW/drv-before.txt" && drv=1
  rx_case "$ZPORT" --rx zcrx --rx-buf-len 64K --area "$area" --verify
  q=$RX_Q
  recv_split
  [ "$R_CP" -eq 0 ] && [ "$R_UN" -eq 0 ] ||
    fail "with $len-byte buffers zcnet counted $R_CP B copied and $R_UN B unknown of $BYTES B (want all zero-copy)"
  if [ "$drv" = 0 ]; then
    pass "$BYTES B verified, all zero-copy, into $len-byte buffers on queue $q in $R_SECS s (the driver has no per-queue payload counters to confirm the buffer size); NIC restored"
  fi
  drv_stats "$TW/drv-after.txt" || fail "ethtool -S $T_IF worked before the run, not after"
  local nm bufs
  nm=$(drv_delta "$TW/drv-before.txt" "$TW/drv-after.txt" "$q" payload_netmem)
  bufs=$(drv_delta "$TW/drv-before.txt" "$TW/drv-after.txt" "$q" netmem_bufs)
  [ "$nm" -ge "$BYTES" ] || fail "the driver put $nm B into queue $q's provider buffers, less than the $BYTES B zcnet received zero-copy"
  [ "$bufs" -gt 0 ] || fail "the driver counted no provider buffers on queue $q"
  local avg=$((nm / bufs)) page
  page=$(getconf PAGESIZE)
  [ "$avg" -gt "$page" ] ||
    fail "the driver wrote $nm B into $bufs provider buffers on queue $q ($avg B each): not more than a page, so the $len-byte buffers were not used"
  pass "$BYTES B verified, all zero-copy, on queue $q in $R_SECS s; the driver wrote $nm B into $bufs buffers of up to $len B ($avg B each); NIC restored"
}

t_zcrx_copies() {
  need_iface
  need_zcnet
  need_python
  need_local
  need_remote
  local q b stats=0 kern notes
  kern="Linux $(uname -r)"
  zcrx_feature stats && stats=1
  drv_stats "$TW/drv-0.txt" || skip "the driver of $T_IF has no per-queue payload counters (ethtool -S rxN_payload_*: the software NIC, kmod/zcnic, has them) to check zcnet's split against"
  # (a) An area of 16 pages: it runs dry; the driver's allocations fail and it drops, the
  # kernel does not copy (io_pp_zc_alloc_netmems() finds no net_iov: ZCRX_EVENT_ALLOC_FAIL).
  # The drops back TCP's retransmission timer off; in a slow guest a gap can pass the send's
  # default 10 s stall timeout, so the peer's send waits up to 60 s.
  RX_SEND_ARGS="--stall-timeout 60" rx_case "$ZPORT" --rx zcrx --area 64K --verify
  q=$RX_Q
  cp "$TW/recv.out" "$TW/recv-small.out"
  recv_split
  drv_stats "$TW/drv-1.txt" || fail "ethtool -S $T_IF stopped working"
  local nm other af
  nm=$(drv_delta "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" payload_netmem)
  af=$(drv_delta "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" alloc_fail)
  other=$(($(drv_delta_others "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" payload_page) +
    $(drv_delta_others "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" payload_linear) +
    $(drv_delta "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" payload_page) +
    $(drv_delta "$TW/drv-0.txt" "$TW/drv-1.txt" "$q" payload_linear)))
  [ "$af" -gt 0 ] || fail "small area: the driver's buffer allocations on queue $q never failed: a 64 KiB area did not run dry"
  [ "$nm" -ge "$BYTES" ] || fail "small area: the driver put $nm B into queue $q's area, less than the $BYTES B received"
  [ "$other" -eq 0 ] || fail "small area: the driver put $other B of payload outside the area (pages or linear parts)"
  if [ "$stats" = 1 ]; then
    [ "$R_CP" -eq 0 ] && [ "$R_ZC" -eq "$BYTES" ] ||
      fail "small area: zcnet counted $R_ZC B zero-copy and $R_CP B copied, but the driver put all $BYTES B into the area and the kernel's zcrx statistics must count no copy"
    notes="(a) 64 KiB area: all $BYTES B zero-copy by zcnet and the kernel's zcrx statistics; the driver wrote $nm B into the area, its allocations failed $af times (dropped, not copied), starved ${R_STARVED}x"
  else
    [ "$R_UN" -eq "$BYTES" ] ||
      fail "small area on $kern (no zcrx statistics): zcnet counted $R_ZC B zero-copy, $R_CP B copied, $R_UN B unknown (want all unknown: nothing tells it)"
    notes="(a) 64 KiB area: $BYTES B unknown to zcnet ($kern has no zcrx statistics); the driver wrote $nm B into the area, its allocations failed $af times (dropped, not copied)"
  fi
  # (b) The flow steered to queue q, zcrx bound to another: every byte arrives in pages and
  # the kernel copies it into the area.
  b=$((q - 1))
  [ "$b" -ge 0 ] || skip "$T_IF has one RX queue: no other queue to bind zcrx to"
  RX_RECV_QUEUE=$b rx_case "$((ZPORT + 1))" --rx zcrx --verify
  recv_split
  drv_stats "$TW/drv-2.txt" || fail "ethtool -S $T_IF stopped working"
  local pg lin nmb
  pg=$(drv_delta "$TW/drv-1.txt" "$TW/drv-2.txt" "$q" payload_page)
  lin=$(drv_delta "$TW/drv-1.txt" "$TW/drv-2.txt" "$q" payload_linear)
  nmb=$(drv_delta "$TW/drv-1.txt" "$TW/drv-2.txt" "$b" payload_netmem)
  [ "$nmb" -eq 0 ] || fail "unsteered: the driver put $nmb B into queue $b's area although the flow was steered to queue $q"
  [ $((pg + lin)) -ge "$BYTES" ] || fail "unsteered: queue $q received $((pg + lin)) B of payload, less than the $BYTES B sent"
  if [ "$stats" = 1 ]; then
    [ "$R_ZC" -eq 0 ] && [ "$R_CP" -eq "$BYTES" ] ||
      fail "unsteered: zcnet counted $R_ZC B zero-copy and $R_CP B copied, but the kernel copied all $BYTES B (none reached queue $b's area; $pg B in pages, $lin B in linear parts on queue $q)"
    notes+="; (b) flow on queue $q, zcrx on $b: all $BYTES B copied by zcnet and the kernel's zcrx statistics; the driver: $pg B in pages, $lin B linear on queue $q, none into the area"
  else
    [ "$R_ZC" -eq 0 ] ||
      fail "unsteered on $kern (no zcrx statistics): zcnet counted $R_ZC B zero-copy of bytes the kernel copied"
    notes+="; (b) flow on queue $q, zcrx on $b: $R_CP B copied, $R_UN B unknown to zcnet ($kern has no zcrx statistics), none zero-copy; the driver: $pg B in pages, $lin B linear, none into the area"
  fi
  pass "$notes; NIC restored"
}

t_bench_rx() {
  need_iface
  need_zcnet
  need_python
  need_local
  need_root "zcnet nic setup changes the NIC"
  [ -n "$REMOTE_NETNS" ] ||
    skip "bench rx runs its clients in the peer's network namespace on this host: set ZCNET_HW_REMOTE_NETNS (an ssh peer cannot run them)"
  local port=$((ZPORT + 3)) q rc d rows="zcrx" stats=0 drv=0
  [ "$MEM" = udmabuf ] && rows="zcrx,devmem"
  zcrx_feature stats && stats=1
  q=$(pick_queue) || exit $?
  drv_stats "$TW/drv-before.txt" && drv=1
  snapshot "$TW/before.txt" >/dev/null
  mark_dirty
  timeout --foreground -s TERM "$((TMO + 60))" "$ZCNET" nic setup --iface "$T_IF" --queue "$q" --port "$port" --json -- \
    "$ZCNET" bench rx --iface "$T_IF" --queue "$q" --listen "$LOCAL_V4:$port" --client-netns "$REMOTE_NETNS" \
    --rx "$rows" --connections 4 --threads 2 --duration 3 --verify --json >"$TW/bench.out" 2>"$TW/bench.err"
  rc=$?
  settled_snapshot "$TW/after.txt" "$TW/before.txt"
  d=$(differs "$TW/before.txt" "$TW/after.txt")
  [ -z "$d" ] && unmark_dirty
  [ "$rc" -eq 0 ] || fail "bench rx exited $rc: $(zline "$TW/bench.err")"
  [ -z "$d" ] || fail "the NIC was not restored after bench rx (after waiting ${SETTLED_WAIT} s): $d"
  local check
  check=$("$PYTHON" - "$TW/bench.out" "$rows" "$stats" 2>&1 <<'PYEOF'
import json, sys
# nic setup --json prints its own document first: take the one with the results.
txt, docs, i, dec = open(sys.argv[1]).read(), [], 0, json.JSONDecoder()
while True:
    i = txt.find("{", i)
    if i < 0:
        break
    try:
        d, i = dec.raw_decode(txt, i)
        docs.append(d)
    except ValueError:
        i += 1
doc = ([d for d in docs if "results" in d] or [{"results": []}])[-1]
want, stats = sys.argv[2].split(","), sys.argv[3] == "1"
rows = {r["rx"]: r for r in doc["results"] if r["path"] == "iface"}
bad, ok, zc = [], [], 0
for m in want:
    r = rows.get(m)
    if r is None:
        bad.append("no %s row" % m); continue
    why = r.get("error") or r.get("refused") or r.get("skipped")
    if why:
        bad.append("%s: %s" % (m, why)); continue
    b, z, c, u = r["rx_bytes"], r["zerocopy_bytes"], r["copied_bytes"], r["unknown_copy_bytes"]
    if r["requests"] <= 0 or b <= 0:
        bad.append("%s: no round trip" % m); continue
    if m == "zcrx" and not stats:
        if z + u != b or c:
            bad.append("zcrx: %d B received, %d zero-copy, %d copied, %d unknown (want none copied)" % (b, z, c, u)); continue
        ok.append("zcrx %d req, %d B (unknown to zcnet: no zcrx statistics)" % (r["requests"], b)); zc += b; continue
    if z != b:
        bad.append("%s: %d B received, only %d zero-copy (%d copied, %d unknown)" % (m, b, z, c, u)); continue
    ok.append("%s %d req, %.0f qps, %d B all zero-copy" % (m, r["requests"], r["qps"] or 0, b)); zc += b
print("; ".join(bad) if bad else "%d\t%s" % (zc, "; ".join(ok)))
sys.exit(1 if bad else 0)
PYEOF
) || fail "bench rx on $T_IF: $(one_line "$check")"
  local zcb=${check%%$'\t'*} summary=${check#*$'\t'} nm
  if [ "$drv" = 1 ] && drv_stats "$TW/drv-after.txt"; then
    nm=$(drv_delta "$TW/drv-before.txt" "$TW/drv-after.txt" "$q" payload_netmem)
    [ "$nm" -ge "$zcb" ] || fail "bench rx counted $zcb B received by its mechanisms, but the driver put only $nm B into queue $q's provider buffers"
    summary+="; the driver put $nm B into queue $q's provider buffers"
  fi
  local drvname label
  drvname=$(run_in ethtool -i "$T_IF" 2>/dev/null | sed -n 's/^driver: //p')
  label="figures of the device under test (${drvname:-driver unknown})"
  [ "$drvname" = zcnic ] && label="figures of the software NIC (zcnic, a CPU copy), never a NIC's"
  pass "queue $q, 4 connections, 64 KiB requests, $label: $summary; NIC restored"
}
