#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the kernel lab's guest (scripts/kmod-proof.sh starts it there):
#
#   kmod/tools/zcnic-proof-guest.sh KO NCDEVMEM|- ZCRX|- [STEP...]
#
# Loads zcnic, puts zcnic1 into a namespace and proves the device with tools
# nobody here wrote: the kernel's ncdevmem (its own bind checks, devmem RX with
# a udmabuf, devmem TX) and liburing's examples/zcrx (io_uring zcrx in device
# mode), every byte checked by the tool itself. Then it unloads the module.
# Steps (default all): smoke ncdevmem-checks ncdevmem-rx ncdevmem-hds ncdevmem-tx zcrx unload-held
# (the last unloads the module while a devmem binding and a zcrx area are held).
# Prints `zcnic-proof: PASS|FAIL|SKIP step (detail)` per step and exits 1 if any
# failed. Guest only: the addresses below exist nowhere else.
set -u
KO=$1 NCDEVMEM=$2 ZCRX=$3
shift 3
steps=${*:-smoke ncdevmem-checks ncdevmem-rx ncdevmem-hds ncdevmem-tx zcrx unload-held}
tools=$(cd "$(dirname "$0")" && pwd)
py=$(command -v python3)
A=192.168.77.1 B=192.168.77.2 NS=zcpeer
out=/tmp/zcnic-proof
mkdir -p $out
failed=0 passed=0

result() { # PASS|FAIL|SKIP STEP DETAIL
  echo "zcnic-proof: $1 $2 ($3)"
  case $1 in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
  esac
}
show() { # FILE: the tail of a tool's output, indented
  sed 's/^/    | /' "$1" | tail -n "${2:-15}"
}
want() { [[ " $steps " == *" $1 "* ]]; }
rxbytes() { # RX bytes of zcnic0's queue $1, from the netdev family's per-queue stats
  "$py" "$tools/zcnic-nl.py" qstats zcnic0 | awk -v q="$1" '$1 == "rx" && $2 == q { print $6 }'
}

echo "zcnic-proof: kernel $(uname -r), module $KO"
if ! busybox insmod "$KO" queues=4; then
  result FAIL load "insmod failed: dmesg below"
  dmesg | tail -n 20
  exit 1
fi
ip netns add $NS
ip link set zcnic1 netns $NS
ip addr add $A/24 dev zcnic0
ip link set zcnic0 up
ip -n $NS addr add $B/24 dev zcnic1
ip -n $NS link set zcnic1 up
ip -n $NS link set lo up
result PASS load "zcnic0 here, zcnic1 in netns $NS, $(ls /sys/class/net/zcnic0/queues | grep -c rx) RX queues"

if want smoke; then
  # Plain TCP both ways through the copy path (no provider, header split off).
  timeout 120 $py "$tools/zcnic-send.py" --listen 5000 1000000 >$out/smoke.rx 2>&1 &
  rx=$!
  ip netns exec $NS timeout 120 $py "$tools/zcnic-send.py" $A 5000 1000000 >$out/smoke.tx 2>&1
  wait $rx
  rc=$?
  (ip netns exec $NS timeout 120 $py "$tools/zcnic-send.py" --listen 5001 300000 >$out/smoke.rx2 2>&1) &
  rx2=$!
  timeout 120 $py "$tools/zcnic-send.py" $B 5001 300000 >$out/smoke.tx2 2>&1
  wait $rx2
  rc2=$?
  if [ $rc = 0 ] && [ $rc2 = 0 ]; then
    result PASS smoke "TCP 1 MB zcnic1->zcnic0 and 300 KB back, bytes checked: $(cat $out/smoke.rx)"
  else
    result FAIL smoke "TCP through the pair"
    show $out/smoke.rx
    show $out/smoke.tx
    show $out/smoke.rx2
  fi
fi

if want ncdevmem-checks; then
  if [ "$NCDEVMEM" = - ]; then
    result SKIP ncdevmem-checks "no ncdevmem built"
  else
    # Without -s/-c ncdevmem runs its own binding checks (run_devmem_tests):
    # bind with no queues and with header split off must fail, with it on
    # succeed, and shrinking the channels below a bound queue must fail.
    timeout 300 "$NCDEVMEM" -f zcnic0 >$out/checks 2>&1
    rc=$?
    if [ $rc = 0 ]; then
      result PASS ncdevmem-checks "ncdevmem -f zcnic0 exit 0: $(grep -c . $out/checks) lines, last: $(tail -n1 $out/checks)"
    else
      result FAIL ncdevmem-checks "ncdevmem -f zcnic0 exit $rc"
      show $out/checks 30
    fi
  fi
fi

if want ncdevmem-rx; then
  if [ "$NCDEVMEM" = - ]; then
    result SKIP ncdevmem-rx "no ncdevmem built"
  else
    # devmem RX into a udmabuf on the last queue, ncdevmem checking every
    # byte (-v 7: bytes 1..6 and a newline) and failing on any payload left
    # in the linear part (-L); the flow is steered by the ntuple rule
    # ncdevmem itself adds with ethtool -N.
    n=1000000
    before=$(rxbytes 3)
    timeout 600 "$NCDEVMEM" -l -L -f zcnic0 -s $A -p 5201 -v 7 >$out/rx.out 2>$out/rx.err &
    srv=$!
    ip netns exec $NS timeout 300 $py "$tools/zcnic-send.py" --pattern ncdevmem --chunk 16384 $A 5201 $n >$out/rx.tx 2>&1
    wait $srv
    rc=$?
    frags=$(grep -c '^received frag_page' $out/rx.err)
    total=$(grep -o 'total_received=[0-9]*' $out/rx.err | tail -n1)
    vals=$(grep -c 'Validated buffer' $out/rx.out)
    onq=$(($(rxbytes 3) - before))
    if [ $rc = 0 ] && [ "${total#*=}" = $n ] && [ "$onq" -gt $n ]; then
      result PASS ncdevmem-rx "ncdevmem -l -L -v 7 exit 0, $total in $frags dma-buf frags, $vals buffers validated; queue 3 received $onq bytes (qstats)"
    else
      result FAIL ncdevmem-rx "ncdevmem -l exit $rc, ${total:-no data}"
      grep -v '^received frag_page\|^recvmsg ret\|^total_received' $out/rx.err | tail -n 25 | sed 's/^/    | /'
      show $out/rx.tx 5
    fi
  fi
fi

if want ncdevmem-hds; then
  if [ "$NCDEVMEM" = - ]; then
    result SKIP ncdevmem-hds "no ncdevmem built"
  else
    # Header split at every payload size (the kernel's devmem.py run_rx_hds):
    # one send of SIZE bytes must arrive in dma-buf frags, none in the
    # linear part (-L).
    bad=
    for size in 1 64 1448 4096 9000; do
      timeout 300 "$NCDEVMEM" -l -L -f zcnic0 -s $A -p 5203 >$out/hds.$size.out 2>$out/hds.$size.err &
      srv=$!
      ip netns exec $NS timeout 120 $py "$tools/zcnic-send.py" --chunk $size $A 5203 $size >$out/hds.$size.tx 2>&1
      wait $srv || bad="$bad $size"
    done
    if [ -z "$bad" ]; then
      result PASS ncdevmem-hds "ncdevmem -l -L exit 0 for single sends of 1, 64, 1448, 4096 and 9000 bytes"
    else
      result FAIL ncdevmem-hds "ncdevmem -l -L failed for sizes:$bad"
      for size in $bad; do grep -v '^received frag\|^recvmsg ret\|^total_rec' $out/hds.$size.err | tail -n 8 | sed 's/^/    | /'; done
    fi
  fi
fi

if want ncdevmem-tx; then
  if [ "$NCDEVMEM" = - ]; then
    result SKIP ncdevmem-tx "no ncdevmem built"
  else
    # devmem TX from a udmabuf bound to zcnic1 (bind-tx, SCM_DEVMEM_DMABUF,
    # MSG_ZEROCOPY completions); the device reads it by DMA address.
    $py -c 'import sys
for i in range(200): sys.stdout.write("line %04d " % i + "abcdefghijklmnopqrstuvwxyz" * 3 + "\n")' >$out/tx.in
    timeout 150 $py "$tools/zcnic-send.py" --listen 5202 --save $out/tx.got >$out/tx.rx 2>&1 &
    rx=$!
    for _ in $(seq 1 120); do # the listener may take a while to start in a TCG guest
      ss -Hltn 'sport = :5202' | grep -q . && break
      sleep 0.5
    done
    ip netns exec $NS timeout 120 "$NCDEVMEM" -f zcnic1 -s $A -p 5202 <$out/tx.in >$out/tx.out 2>$out/tx.err
    rc=$?
    wait $rx
    if [ $rc = 0 ] && cmp -s $out/tx.in $out/tx.got; then
      result PASS ncdevmem-tx "ncdevmem TX exit 0 ($(tail -n1 $out/tx.err)), $(wc -c <$out/tx.got) bytes received and equal"
    else
      result FAIL ncdevmem-tx "ncdevmem TX exit $rc"
      show $out/tx.err 40
      dmesg | tail -n 20 | sed "s/^/    dmesg: /"
      show $out/tx.rx 5
    fi
  fi
fi

if want zcrx; then
  if [ "$ZCRX" = - ]; then
    result SKIP zcrx "no zcrx example built"
  else
    # io_uring zcrx bound to queue 2: header split on (ethtool netlink),
    # the flow steered there by an ntuple rule, the example checking every
    # byte (-v) and the total (-s).
    n=2000000
    q=2
    "$py" "$tools/zcnic-nl.py" rings zcnic0 --split on --hds-thresh 0 >$out/zcrx.rings 2>&1
    ethtool -N zcnic0 flow-type tcp4 dst-ip $A dst-port 5301 action $q >$out/zcrx.rule 2>&1
    rule=$(grep -o 'ID [0-9]*' $out/zcrx.rule | cut -d' ' -f2)
    before=$(rxbytes $q)
    timeout 600 stdbuf -oL -eL "$ZCRX" -p 5301 -i zcnic0 -q $q -v -s $n >$out/zcrx.out 2>&1 &
    srv=$!
    ip netns exec $NS timeout 300 $py "$tools/zcnic-send.py" --pattern zcrx $A 5301 $n >$out/zcrx.tx 2>&1
    for _ in $(seq 1 60); do
      grep -q 'Connection terminated' $out/zcrx.out && break
      kill -0 $srv 2>/dev/null || break
      sleep 1
    done
    if kill -0 $srv 2>/dev/null; then
      kill $srv
      wait $srv 2>/dev/null
      rc=killed
    else
      wait $srv
      rc=$?
    fi
    [ -n "$rule" ] && ethtool -N zcnic0 delete "$rule"
    onq=$(($(rxbytes $q) - before))
    "$py" "$tools/zcnic-nl.py" rings zcnic0 --split off >/dev/null 2>&1
    line=$(grep 'Connection terminated' $out/zcrx.out)
    if [ "$rc" = killed ] && [[ $line == *"received $n,"* ]] && [ "$onq" -gt $n ]; then
      result PASS zcrx "examples/zcrx -v -s $n on queue $q: $line; queue $q received $onq bytes (qstats); rings: $(cat $out/zcrx.rings)"
    else
      result FAIL zcrx "examples/zcrx exit $rc: ${line:-no connection summary}"
      show $out/zcrx.out 25
      show $out/zcrx.rings 3
      show $out/zcrx.tx 5
    fi
  fi
fi

echo "zcnic-proof: zcnic0's per-queue counters (netdev qstats):"
"$py" "$tools/zcnic-nl.py" qstats zcnic0 | sed 's/^/    /'

ip netns del $NS
sleep 1
if want unload-held && [ "$NCDEVMEM" != - ] && [ "$ZCRX" != - ]; then
  # Unload while a devmem binding (ncdevmem waiting for a connection on
  # queue 3) and a zcrx area (examples/zcrx on queue 1) are held: the core
  # unbinds both when the devices unregister.
  "$py" "$tools/zcnic-nl.py" rings zcnic0 --split on --hds-thresh 0 >/dev/null 2>&1
  timeout 300 "$NCDEVMEM" -l -f zcnic0 -s $A -p 5401 -t 3 -q 1 -n >$out/held.ncdevmem 2>&1 &
  held1=$!
  timeout 300 stdbuf -oL "$ZCRX" -p 5402 -i zcnic0 -q 1 >$out/held.zcrx 2>&1 &
  held2=$!
  for _ in $(seq 1 120); do
    [ "$(ss -Hltn '( sport = :5401 or sport = :5402 )' | grep -c .)" = 2 ] && break
    sleep 0.5
  done
  bound=$(ss -Hltn '( sport = :5401 or sport = :5402 )' | grep -c .)
  timeout 120 busybox rmmod zcnic
  rc=$?
  gone=yes
  kill -0 $held1 2>/dev/null && gone=no
  kill $held1 $held2 2>/dev/null
  wait $held1 $held2 2>/dev/null
  if [ $rc = 0 ] && [ "$bound" = 2 ]; then
    result PASS unload-held "rmmod zcnic with a devmem binding and a zcrx area held: exit 0 (ncdevmem ended by then: $gone)"
  else
    result FAIL unload-held "rmmod exit $rc with $bound of 2 listeners bound"
    show $out/held.ncdevmem 10
    show $out/held.zcrx 10
  fi
  sleep 1
  [ -d /sys/module/zcnic ] && busybox rmmod zcnic
else
  # Unload with nothing held: every binding above has been given back.
  if busybox rmmod zcnic; then
    result PASS unload "rmmod zcnic"
  else
    result FAIL unload "rmmod zcnic failed"
  fi
fi
if dmesg | grep -E -q 'WARNING|BUG|leak|Oops'; then
  result FAIL dmesg "the kernel complained"
  dmesg | grep -E -A12 'WARNING|BUG|leak|Oops' | head -n 60
fi
echo "zcnic-proof: $passed passed, $failed failed"
[ $failed = 0 ]
