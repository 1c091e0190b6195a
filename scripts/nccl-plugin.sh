#!/usr/bin/env bash
# Builds the NCCL net plugin and puts it where NCCL looks for it, under NCCL's name:
#
#     scripts/nccl-plugin.sh [DIR]        (default DIR: target/release)
#
# then run NCCL programs with LD_LIBRARY_PATH=DIR NCCL_NET_PLUGIN=zcnet (or, from NCCL 2.21
# on, NCCL_NET_PLUGIN=DIR/libnccl-net-zcnet.so: NCCL 2.20 takes a plugin name only). Cargo names the library libnccl_net_zcnet.so;
# NCCL loads libnccl-net-<NCCL_NET_PLUGIN>.so.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -gt 1 ] || [[ ${1:-} == -* ]]; then
  echo "nccl-plugin: usage: scripts/nccl-plugin.sh [DIR] (one directory, default target/release)" >&2
  exit 2
fi
dir=${1:-target/release}
cargo build --release -p zcnet-nccl
mkdir -p "$dir"
cp -f target/release/libnccl_net_zcnet.so "$dir/libnccl-net-zcnet.so"
echo "built $dir/libnccl-net-zcnet.so: LD_LIBRARY_PATH=$dir NCCL_NET_PLUGIN=zcnet"
