#!/usr/bin/env bash
# zcnic-measure (run inside the kernel lab's guest by `scripts/zcnic-lab.sh --measure`, once the
# software NIC is loaded and wired): total CPU per byte received by copy receive, zcrx and
# devmem TCP from a peer namespace over the software NIC, interleaved rounds, medians.
#
#   ZCNET=... IFACE=zcnic0 LOCAL_V4=... PEER_NS=... BYTES=N ROUNDS=R JSON=0|1 bash zcnic-measure.sh
#
# CPU is the guest's, all CPUs, from /proc/stat (user, nice, system, irq, softirq) between the
# receiver listening and the peer's send ending: the sender, the device's "DMA" (zcnic copies
# each payload into the queue's page pool pages on a CPU: a NIC's DMA engine would not) and the
# receiver. Payloads are not verified here (the pattern check would add the same CPU to every
# mode and hide their difference: the NIC suite verifies every byte of these paths), but every
# run must receive what the peer sent, and zcrx/devmem must have moved it zero copy. These are
# software NIC figures under QEMU TCG: comparisons between the modes in one run, never NIC
# figures.
set -uo pipefail
me=zcnic-measure
: "${ZCNET:?}" "${IFACE:?}" "${LOCAL_V4:?}" "${PEER_NS:?}"
BYTES=${BYTES:-64M}
ROUNDS=${ROUNDS:-3}
JSON=${JSON:-0}
MODES=(copy zcrx devmem)
WORK=$(mktemp -d /tmp/zcnic-measure.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)

busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8; exit}' /proc/stat; }
jget() { python3 -c 'import json,sys; d=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]; print(eval(sys.argv[2]))' "$@"; }
last_queue() { echo $(($(ls -d /sys/class/net/"$IFACE"/queues/rx-* | wc -l) - 1)); }

# run MODE PORT: one transfer; prints "cpu_s wall_s zerocopy_bytes copied_bytes" or fails.
run() {
  local mode=$1 port=$2 q pid b0 b1 t0 t1 out=$WORK/$1-$2
  q=$(last_queue)
  case $mode in
    copy) "$ZCNET" recv --listen "$LOCAL_V4:$port" --rx copy --discard --json >"$out.json" 2>"$out.err" & ;;
    zcrx | devmem)
      local extra=()
      [ "$mode" = devmem ] && extra=(--mem udmabuf)
      "$ZCNET" nic setup --iface "$IFACE" --queue "$q" --port "$port" --json -- \
        "$ZCNET" recv --listen "$LOCAL_V4:$port" --iface "$IFACE" --queue "$q" --rx "$mode" \
        "${extra[@]}" --discard --json >"$out.json" 2>"$out.err" &
      ;;
  esac
  pid=$!
  for _ in $(seq 600); do
    grep -q "listening on" "$out.err" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "listening on" "$out.err" || { echo "$me: $mode: recv did not listen: $(tail -n 1 "$out.err")" >&2; kill "$pid" 2>/dev/null; wait "$pid"; return 1; }
  b0=$(busy)
  t0=$(date +%s.%N)
  ip netns exec "$PEER_NS" "$ZCNET" send "$LOCAL_V4:$port" --bytes "$BYTES" --json >"$out.send" 2>"$out.serr" </dev/null ||
    { echo "$me: $mode: the peer's send failed: $(tail -n 1 "$out.serr")" >&2; kill "$pid" 2>/dev/null; wait "$pid"; return 1; }
  t1=$(date +%s.%N)
  b1=$(busy)
  wait "$pid" || { echo "$me: $mode: recv failed: $(tail -n 1 "$out.err")" >&2; return 1; }
  local got sent zc cp
  got=$(jget "$out.json" 'd["bytes"]') sent=$(jget "$out.send" 'd["bytes"]')
  zc=$(jget "$out.json" 'd.get("zerocopy_bytes", 0)') cp=$(jget "$out.json" 'd.get("copied_bytes", 0)')
  [ -n "$got" ] && [ "$got" = "$sent" ] || { echo "$me: $mode: received $got B of the $sent B sent" >&2; return 1; }
  [ "$mode" = copy ] || [ "${zc:-0}" -gt 0 ] || { echo "$me: $mode: nothing was received zero copy ($cp B copied)" >&2; return 1; }
  echo "$(awk -v a="$b0" -v b="$b1" -v hz="$hz" 'BEGIN{printf "%.3f", (b - a) / hz}') $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b - a}') $got $zc $cp"
}

port=6100
for r in $(seq "$ROUNDS"); do
  # Rotate the order each round, so no mode always runs first.
  for i in 0 1 2; do
    m=${MODES[$(((i + r) % 3))]}
    port=$((port + 1))
    line=$(run "$m" "$port") || exit 1
    echo "$m $line" >>"$WORK/results"
    [ "$JSON" = 1 ] || echo "round $r: $m: $line (cpu_s wall_s bytes zerocopy_bytes copied_bytes)" >&2
  done
done

python3 - "$WORK/results" "$JSON" "$BYTES" "$ROUNDS" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m, cpu, wall, got, zc, cp = line.split()
    rows.setdefault(m, []).append((float(cpu), float(wall), int(got), int(zc), int(cp)))
out = []
for m in ("copy", "zcrx", "devmem"):
    v = rows[m]
    gb = [x[2] / 1e9 for x in v]
    out.append({
        "mode": m,
        "cpu_s_per_gb": statistics.median(x[0] / g for x, g in zip(v, gb)),
        "gb_per_s": statistics.median(g / x[1] for x, g in zip(v, gb)),
        "bytes": v[0][2],
        "zerocopy_bytes": v[-1][3],
        "copied_bytes": v[-1][4],
    })
base = out[0]["cpu_s_per_gb"]
for o in out:
    o["cpu_vs_copy"] = o["cpu_s_per_gb"] / base
if sys.argv[2] == "1":
    print(json.dumps({"label": "software NIC (zcnic) in a QEMU TCG guest", "rounds": int(sys.argv[4]), "rows": out}))
else:
    print(f"software NIC (zcnic) in a QEMU TCG guest, {sys.argv[3]} B a run, median of {sys.argv[4]} rounds;")
    print("total CPU of the guest (sender, the device's copy on a CPU, receiver); never NIC figures:")
    print(f"  {'mode':7s} {'CPU s/GB':>9s} {'vs copy':>8s} {'GB/s':>7s} {'zero-copy B':>12s} {'copied B':>10s}")
    for o in out:
        print(f"  {o['mode']:7s} {o['cpu_s_per_gb']:9.2f} {o['cpu_vs_copy']:7.2f}x {o['gb_per_s']:7.3f} {o['zerocopy_bytes']:12d} {o['copied_bytes']:10d}")
PY
