#!/usr/bin/env bash
# tokio-echo-bench: zcnet-tokio's echo server against the same echo on plain
# tokio::net::TcpStream, over veth between two network namespaces made for the run.
#
#   scripts/tokio-echo-bench.sh [--rounds 5] [--seconds 3] [--conns 24] [--size 64K]
#                               [--rx auto] [--tx auto] [--path veth|loopback] [--lend on|off]
#                               [--buffers 16]
#
# Builds the example (cargo build --release -p zcnet-tokio --example echo), then for each round
# runs both servers in turn, the order alternating round by round (interleaved): the server in
# namespace A pinned to CPU 0, the client (`echo client`: CONNS connections, each writing a
# SIZE message and reading it back, for SECONDS) in namespace B pinned to CPU 1 (on a machine
# with one CPU, neither is pinned). Prints each run's messages per second, then the median of
# each server and the ratio zcnet/tokio of the medians. --path loopback runs both on 127.0.0.1
# in this namespace instead (no root needed). --lend on (the default): the zcnet server sends
# each received buffer back out itself, lent by its receiver (receive mode uring); off: it
# copies the bytes into its sender's buffers. --buffers: the zcnet server's receive buffers.
#
# As root for veth: namespaces zcteA<pid>/zcteB<pid> with a veth pair (10.231.9.1/30 in A,
# .2 in B), deleted on every exit path. Nothing is sent anywhere else.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
me=tokio-echo-bench
rounds=5 seconds=3 conns=24 size=64K rx=auto tx=auto path=veth lend=on buffers=16
. scripts/lib/args.sh
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --rounds | --seconds | --conns | --size | --rx | --tx | --path | --lend | --buffers) need_value "$1" $# ;;
  esac
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --rx) rx=$2; shift 2 ;;
    --tx) tx=$2; shift 2 ;;
    --path) path=$2; shift 2 ;;
    --lend) lend=$2; shift 2 ;;
    --buffers) buffers=$2; shift 2 ;;
    *) echo "$me: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# Every value checked before anything is built or made (a median needs a round).
need_int --rounds "$rounds" 1 1000
need_seconds --seconds "$seconds"
need_int --conns "$conns" 1 4096
need_size --size "$size"
need_int --buffers "$buffers" 1 65536
need_one_of --lend "$lend" on off
need_one_of --rx "$rx" auto copy uring zcrx devmem
need_one_of --tx "$tx" auto uring uring-zc
case $path in veth | loopback) ;; *) echo "$me: --path veth or loopback, not '$path'" >&2; exit 2 ;; esac
if [ "$path" = veth ] && [ "$(id -u)" != 0 ]; then
  echo "$me: --path veth makes network namespaces: run it as root (or use --path loopback)" >&2
  exit 2
fi

cargo build --release -q -p zcnet-tokio --example echo || { echo "$me: build failed" >&2; exit 1; }
echo_bin=target/release/examples/echo

A=zcteA$$ B=zcteB$$
work=$(mktemp -d)
cleanup() {
  # Only this script's server (its pid is in a file: run() runs in a subshell).
  if [ -s "$work/server.pid" ]; then kill "$(cat "$work/server.pid")" 2>/dev/null; fi
  rm -rf "$work"
  if [ "$path" = veth ]; then
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$path" = veth ]; then
  ip netns add "$A" && ip netns add "$B" &&
    ip link add zcte0 netns "$A" type veth peer name zcte1 netns "$B" &&
    ip -n "$A" addr add 10.231.9.1/30 dev zcte0 && ip -n "$B" addr add 10.231.9.2/30 dev zcte1 &&
    ip -n "$A" link set zcte0 up && ip -n "$B" link set zcte1 up &&
    ip -n "$A" link set lo up && ip -n "$B" link set lo up ||
    { echo "$me: could not make the veth lab" >&2; exit 1; }
  addr=10.231.9.1:7400
  in_a=(ip netns exec "$A") in_b=(ip netns exec "$B")
else
  addr=127.0.0.1:7400
  in_a=() in_b=()
fi
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  pin_a=(taskset -c 0) pin_b=(taskset -c 1)
else
  pin_a=() pin_b=()
fi

# One run: server `$1` (zcnet|tokio) up, the client against it, the server stopped (its stdin
# closed). Prints the client's msg_per_s.
run() {
  local imp=$1 fifo out rate log="$work/$1.log"
  fifo=$(mktemp -u) && mkfifo "$fifo" || return 1
  "${pin_a[@]}" "${in_a[@]}" "$echo_bin" server "$addr" --impl "$imp" --rx "$rx" --tx "$tx" --size "$size" --lend "$lend" --buffers "$buffers" \
    <"$fifo" 2>"$log" &
  local pid=$!
  echo "$pid" >"$work/server.pid"
  exec 9>"$fifo"
  rm -f "$fifo"
  # Ready once it says what it serves with (the line names the receive and send modes it
  # really got: a fallback shows there).
  local waited=0
  until grep -q "^echo: .* server on" "$log" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null || [ $waited -ge 100 ]; then
      echo "$me: the $imp server did not start: $(tail -1 "$log")" >&2
      return 1
    fi
    sleep 0.05; waited=$((waited + 1))
  done
  [ -e "$work/$imp.said" ] || { grep -m1 "^echo: .* server on" "$log" >&2; : >"$work/$imp.said"; }
  out=$("${pin_b[@]}" "${in_b[@]}" "$echo_bin" client "$addr" --conns "$conns" --size "$size" --seconds "$seconds")
  exec 9>&-
  wait "$pid" 2>/dev/null
  : >"$work/server.pid"
  rate=$(sed -n 's/.*msg_per_s=\([0-9.]*\).*/\1/p' <<<"$out")
  [ -n "$rate" ] || { echo "$me: no result from the $imp run: $out" >&2; return 1; }
  echo "$rate"
}

declare -a Z T
echo "$me: $path, $conns connections, $size messages, $seconds s per run, $rounds rounds (receive $rx, send $tx)"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order="zcnet tokio"; else order="tokio zcnet"; fi
  for imp in $order; do
    rate=$(run "$imp") || exit 1
    printf 'round %d  %-5s  %10.1f msg/s\n' "$r" "$imp" "$rate"
    if [ "$imp" = zcnet ]; then Z+=("$rate"); else T+=("$rate"); fi
  done
done
python3 - "${Z[*]}" "${T[*]}" <<'EOF'
import statistics, sys
z = [float(x) for x in sys.argv[1].split()]
t = [float(x) for x in sys.argv[2].split()]
mz, mt = statistics.median(z), statistics.median(t)
print(f"median  zcnet {mz:10.1f} msg/s   tokio {mt:10.1f} msg/s   zcnet/tokio {mz / mt:.2f}x")
EOF
