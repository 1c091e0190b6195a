#!/bin/bash
# Regenerates tests/captured/*.hex: builds the capture example, runs it as root inside a
# throwaway network namespace with a veth pair va/vb, and deletes the namespace on every exit.
# Usage (from the repository root): crates/zcnet-netlink/examples/capture.sh [OUT_DIR]
set -euo pipefail
OUT=${1:-crates/zcnet-netlink/tests/captured}
cargo build -q -p zcnet-netlink --example capture
BIN=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/examples/capture
NS=zcnl-cap-$$
cleanup() { ip netns del "$NS" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add "$NS"
ip -n "$NS" link add va type veth peer name vb
ip -n "$NS" link set lo up
ip -n "$NS" link set va up
ip -n "$NS" link set vb up
ip netns exec "$NS" "$BIN" "$OUT" va
