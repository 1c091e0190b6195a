#!/usr/bin/env bash
# The GPU suite: run it on any Linux machine with an NVIDIA GPU, in one command, as root for the
# veth part:
#
#     scripts/gpu-check.sh [path/to/zcnet]       (default: target/release/zcnet)
#
# With GPU_CHECK_TESTS=path/to/gpu_standin (the zcnet crate's test executable) it also runs the
# library's GPU test cases against the real driver.
#
# It checks what the CPU-only CI cannot: CUDA allocation and dma-buf export, staged receive into
# and staged send from GPU memory with --verify over loopback and over a lab veth pair, the
# devmem refusals with the kernel's exact errors, and the performance ratios of docs/perf.md
# (staged vs host memory, staged vs the naive loop). It prints a table to paste into an issue and
# exits non-zero if a check failed. Results also go to $OUT/gpu-check.txt when OUT is set.
#
# Nothing is left behind: namespaces are deleted on every exit path; GPU memory is freed when
# each zcnet process exits.
set -u
me=gpu-check
. "$(dirname "$0")/lib/args.sh"
[ $# -le 1 ] || { echo "$me: one argument at most, the zcnet binary: scripts/gpu-check.sh [path/to/zcnet]" >&2; exit 2; }
ZCNET=${1:-target/release/zcnet}
BYTES=${GPU_CHECK_BYTES:-4G}
SECS=${GPU_CHECK_SECONDS:-5}
PORT=${GPU_CHECK_PORT:-25201}
need_size GPU_CHECK_BYTES "$BYTES"
need_seconds GPU_CHECK_SECONDS "$SECS"
need_int GPU_CHECK_PORT "$PORT" 1 65535
out=$(mktemp -d)
ns="zcnet-gpucheck-$$"
# The veth pair's names (15 characters at most), made inside the namespaces: nothing is ever
# created in the root namespace.
va="zgc$$a" vb="zgc$$b"
rp=""
cleanup() {
  # A receiver still running (the script was stopped mid-transfer) goes first: it holds GPU
  # memory, the port and the namespace.
  if [ -n "$rp" ]; then kill "$rp" 2>/dev/null; wait "$rp" 2>/dev/null; fi
  ip netns del "${ns}a" 2>/dev/null
  ip netns del "${ns}b" 2>/dev/null
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ ! -x "$ZCNET" ]; then
  echo "gpu-check: no zcnet binary at $ZCNET: build it with 'cargo build --release -p zcnet-cli' (or pass its path)" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: SKIP: no NVIDIA GPU here (nvidia-smi -L failed)"
  exit 77
fi

fails=0
rows=()
row() {
  rows+=("$(printf '%-44s %-6s %s' "$1" "$2" "$3")")
  if [ "$2" = FAIL ]; then fails=$((fails + 1)); fi
  return 0
}
json_field() { python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d.get('$1',''))"; }

# 1. Devices, driver, dma-buf export tried for real.
if "$ZCNET" probe --active --json >"$out/probe.json" 2>"$out/probe.err"; then
  gpu=$(python3 -c "import json; d=json.load(open('$out/probe.json')).get('gpu',{}); ds=d.get('devices',[]); print(ds[0].get('name','?') if ds else 'none: '+str(d.get('error','')))" 2>/dev/null)
  row "probe: GPU" PASS "$gpu"
else
  row "probe --active" FAIL "$(tail -1 "$out/probe.err")"
fi

# One transfer: receiver in the background, sender in front; both with --verify.
# $1 label, $2 receiver prefix (e.g. "ip netns exec X"), $3 sender prefix, $4 address to send to,
# $5 listen address, $6 recv options, $7 send options.
transfer() {
  local label=$1 rpre=$2 spre=$3 to=$4 listen=$5 ropt=$6 sopt=$7
  timeout 300 $rpre "$ZCNET" recv --listen "$listen" --verify --json $ropt >"$out/r.json" 2>"$out/r.err" &
  rp=$!
  # The sender starts once the receiver listens (a GPU's first context can take seconds); a
  # receiver that fails or never listens ends the transfer.
  local waited=0
  while ! grep -q "listening on" "$out/r.err" 2>/dev/null; do
    if ! kill -0 "$rp" 2>/dev/null || [ $waited -ge 600 ]; then break; fi
    sleep 0.1; waited=$((waited + 1))
  done
  local src=1
  if grep -q "listening on" "$out/r.err" 2>/dev/null; then
    timeout 300 $spre "$ZCNET" send "$to" --verify --bytes "$BYTES" --json $sopt >"$out/s.json" 2>"$out/s.err"
    src=$?
  else
    echo "the receiver did not listen" >"$out/s.err"
  fi
  # A sender that failed leaves the receiver waiting for a peer: stop it.
  if [ $src -ne 0 ]; then kill "$rp" 2>/dev/null; fi
  wait "$rp"
  local rrc=$?
  rp=""
  if [ $src -eq 0 ] && [ $rrc -eq 0 ]; then
    local mbs path
    mbs=$(json_field mb_per_s <"$out/s.json")
    path=$(json_field path <"$out/r.json")$(json_field path <"$out/s.json")
    row "$label" PASS "$(printf '%.0f MB/s (sender), path %s' "${mbs:-0}" "${path:-host}")"
    last=${mbs:-0}
  else
    row "$label" FAIL "recv rc=$rrc: $(tail -1 "$out/r.err"); send rc=$src: $(tail -1 "$out/s.err")"
    last=0
  fi
}

# 2. Loopback: into GPU memory (staged), from GPU memory (staged), host baselines, naive loops.
transfer "loopback: host -> host (uring)" "" "" 127.0.0.1:$PORT 127.0.0.1:$PORT "--rx uring" "--tx uring-zc"; host_rx=$last
transfer "loopback: host -> cuda:0 (staged)" "" "" 127.0.0.1:$PORT 127.0.0.1:$PORT "--mem cuda:0" "--tx uring-zc"; gpu_rx=$last
transfer "loopback: host -> cuda:0 (naive loop)" "" "" 127.0.0.1:$PORT 127.0.0.1:$PORT "--mem cuda:0 --naive" "--tx uring-zc"; naive_rx=$last
transfer "loopback: cuda:0 (staged) -> host" "" "" 127.0.0.1:$PORT 127.0.0.1:$PORT "--rx uring" "--mem cuda:0 --tx uring-zc"; gpu_tx=$last
transfer "loopback: cuda:0 (naive loop) -> host" "" "" 127.0.0.1:$PORT 127.0.0.1:$PORT "--rx uring" "--mem cuda:0 --naive"; naive_tx=$last

ratio() { python3 -c "a=float('$1' or 0); b=float('$2' or 0); print(f'{a/b:.2f}x' if b > 0 else 'n/a')"; }
row "ratio: staged rx / host rx (>= 0.9)" INFO "$(ratio "$gpu_rx" "$host_rx")"
row "ratio: staged rx / naive rx (>= 2)" INFO "$(ratio "$gpu_rx" "$naive_rx")"
row "ratio: staged tx / host tx (>= 0.9)" INFO "$(ratio "$gpu_tx" "$host_rx")"
row "ratio: staged tx / naive tx (>= 2)" INFO "$(ratio "$gpu_tx" "$naive_tx")"

# 2b. The same ratios from one command (host, staged and naive receive side by side per path).
if "$ZCNET" bench rx --mem cuda:0 --path loopback --duration "$SECS" >"$out/benchrx.txt" 2>"$out/benchrx.err"; then
  while read -r line; do row "bench rx --mem cuda:0" INFO "$line"; done < <(grep -E '^(loopback|veth) ' "$out/benchrx.txt")
else
  row "bench rx --mem cuda:0" FAIL "$(tail -1 "$out/benchrx.err")"
fi

# 3. A veth pair between two namespaces (root only), and the devmem refusals there.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1; then
  row "veth" SKIP "needs root and iproute2"
elif ! { ip netns add "${ns}a" && ip netns add "${ns}b" &&
    ip -n "${ns}a" link add "$va" type veth peer name "$vb" netns "${ns}b" &&
    ip -n "${ns}a" addr add 10.77.0.1/24 dev "$va" && ip -n "${ns}b" addr add 10.77.0.2/24 dev "$vb" &&
    ip -n "${ns}a" link set "$va" up && ip -n "${ns}b" link set "$vb" up &&
    ip -n "${ns}a" link set lo up && ip -n "${ns}b" link set lo up; } 2>"$out/veth.err"; then
  row "veth" FAIL "setting up the pair: $(tail -1 "$out/veth.err")"
else
  A="ip netns exec ${ns}a" B="ip netns exec ${ns}b"
  transfer "veth: host -> cuda:0 (staged)" "$B" "$A" 10.77.0.2:$PORT 10.77.0.2:$PORT "--mem cuda:0" "--tx uring-zc"
  transfer "veth: cuda:0 (staged) -> host" "$B" "$A" 10.77.0.2:$PORT 10.77.0.2:$PORT "--rx uring" "--mem cuda:0"
  e=$(timeout 120 $B "$ZCNET" recv --listen 10.77.0.2:$PORT --mem cuda:0 --rx devmem --iface "$vb" 2>&1 >/dev/null)
  case "$e" in *"not supported"*|*EOPNOTSUPP*|*"Operation not supported"*) row "veth: devmem rx refused" PASS "$e" ;; *) row "veth: devmem rx refused" FAIL "$e" ;; esac
  # The devmem send is refused after it connects: a peer listens, so that a refused connection
  # cannot pass for the devmem refusal.
  timeout 120 $B "$ZCNET" recv --listen 10.77.0.2:$PORT --discard >/dev/null 2>"$out/r.err" &
  rp=$!
  for _ in $(seq 100); do grep -q "listening on" "$out/r.err" 2>/dev/null && break; sleep 0.1; done
  e=$(timeout 120 $A "$ZCNET" send 10.77.0.2:$PORT --mem cuda:0 --tx devmem --bytes 1M 2>&1 >/dev/null)
  kill "$rp" 2>/dev/null; wait "$rp" 2>/dev/null; rp=""
  case "$e" in
    *"connection refused"*|*"Connection refused"*) row "veth: devmem tx refused" FAIL "the connection was refused, devmem never tried: $e" ;;
    *"not supported"*|*"netmem TX"*|*devmem*|*dma-buf*) row "veth: devmem tx refused" PASS "$e" ;;
    *) row "veth: devmem tx refused" FAIL "$e" ;;
  esac
fi

# 5. A real NCCL run over the plugin against NCCL's socket transport (PyTorch needed; the plugin
#    built beside zcnet: target/release/libnccl_net_zcnet.so, or GPU_CHECK_PLUGIN).
PLUGIN=${GPU_CHECK_PLUGIN:-$(dirname "$ZCNET")/libnccl_net_zcnet.so}
if [ -f "$PLUGIN" ]; then
  python3 "$(dirname "$0")/nccl-torch-check.py" "$PLUGIN" >"$out/nccl.txt" 2>&1; rc=$?
  cat "$out/nccl.txt"
  case $rc in
    0) row "NCCL all_reduce + send/recv over zcnet" PASS "$(grep -m1 '^zcnet' "$out/nccl.txt")" ;;
    77) row "NCCL over zcnet" SKIP "$(tail -1 "$out/nccl.txt")" ;;
    *) row "NCCL over zcnet" FAIL "$(grep -m1 FAIL "$out/nccl.txt")" ;;
  esac
else
  row "NCCL over zcnet" SKIP "no plugin at $PLUGIN (cargo build --release -p zcnet-nccl)"
fi

# 6. The library's GPU test cases (crates/zcnet/tests/gpu_standin.rs: staged sends from borrowed
#    device memory, a UDP GPU sender, DeviceFill, device_addr_of) against the real driver instead
#    of the stand-in: GPU_CHECK_TESTS names that test executable (cargo test --release -p zcnet
#    --test gpu_standin --no-run prints its path). Each child runs alone, as under the stand-in.
if [ -n "${GPU_CHECK_TESTS:-}" ]; then
  cases=$("$GPU_CHECK_TESTS" --list --ignored 2>/dev/null | sed -n 's/^\(child_[a-z_]*\): test$/\1/p')
  [ -n "$cases" ] || row "library tests on the real driver" FAIL "no child_ test listed by $GPU_CHECK_TESTS"
  for c in $cases; do
    if ZCNET_STANDIN_CHILD=1 timeout 120 "$GPU_CHECK_TESTS" --ignored --exact "$c" >"$out/child.txt" 2>&1 &&
      grep -q "1 passed" "$out/child.txt"; then
      row "library test $c (real driver)" PASS ""
    else
      row "library test $c (real driver)" FAIL "$(grep -m1 -E 'panicked|error' "$out/child.txt")"
    fi
  done
else
  row "library tests on the real driver" SKIP "set GPU_CHECK_TESTS to the zcnet gpu_standin test executable"
fi

# 4. Bad input: a device that does not exist.
e=$("$ZCNET" send 127.0.0.1:9 --mem cuda:99 --bytes 1M 2>&1); rc=$?
if [ $rc -eq 2 ]; then row "cuda:99 refused (exit 2)" PASS "$e"; else row "cuda:99 refused (exit 2)" FAIL "rc=$rc $e"; fi

{
  echo "zcnet gpu-check on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), kernel $(uname -r)"
  printf '%s\n' "${rows[@]}"
  echo "failed: $fails"
} | tee "${OUT:-$out}/gpu-check.txt"
[ $fails -eq 0 ]
