# shellcheck shell=bash
# scripts/hw-suite.sh's binding tests, sourced by it before it reads its arguments: zcnet's
# receive on a NIC queue through the library (crates/zcnet/examples/nic_recv.rs), the C ABI
# (examples/c/nic_recv.c) and Python (crates/zcnet-py/examples/nic_recv.py), each run as
# zcrx-verify runs `zcnet recv`: under `zcnet nic setup --iface IF --queue Q --port P -- PROGRAM`,
# the peer sending `zcnet send --verify`. Each program checks every byte against the pattern and
# prints one JSON object; the test requires its API's name, the mechanism, the exact byte count,
# bytes the NIC wrote without a copy, and (into a udmabuf) bytes read back from the dma-buf.
#
# The programs come from ZCNET_HW_BINDINGS, a cargo build directory (default target/debug):
# examples/nic_recv, libzcnet_ffi.so (nic_recv.c is compiled against it here, with $CC or cc)
# and lib_zcnet.so (Python's zcnet._zcnet, put beside the package's python/zcnet here). A program
# not built is a skip naming the build command; scripts/zcnic-lab.sh builds and stages them.

BINDING_TESTS="lib-zcrx lib-devmem c-zcrx c-zcrx-udmabuf c-devmem py-zcrx py-devmem"
BINDINGS=${ZCNET_HW_BINDINGS:-$REPO/target/debug}
BINDINGS_BUILD="cargo build -p zcnet --example nic_recv -p zcnet-ffi -p zcnet-py"

# ZCNET_HW_BINDINGS, checked with the other variables (exit 2 from the caller when it fails).
bindings_check_env() {
  [ -z "${ZCNET_HW_BINDINGS:-}" ] || [ -d "$ZCNET_HW_BINDINGS" ] || {
    echo "hw-suite: ZCNET_HW_BINDINGS=$ZCNET_HW_BINDINGS is not a directory: give the cargo build directory holding the bindings' programs (target/debug after '$BINDINGS_BUILD')" >&2
    return 1
  }
}

# bindings_prog rust|c|python: the receiving program of that API in RX_PROG (rx_case runs it after
# `nic setup --`); a skip when it is not built or cannot be built here.
bindings_prog() {
  local hint="$BINDINGS_BUILD, or set ZCNET_HW_BINDINGS"
  case $1 in
    rust)
      local exe=$BINDINGS/examples/nic_recv
      [ -x "$exe" ] || skip "the library's example is not built: no $exe ($hint)"
      RX_PROG=("$exe" --timeout "$TMO")
      ;;
    c)
      local lib=$BINDINGS/libzcnet_ffi.so cc=${CC:-cc}
      [ -e "$lib" ] || skip "the C ABI's library is not built: no $lib ($hint)"
      has "$cc" || skip "no C compiler ($cc) to build examples/c/nic_recv.c"
      "$cc" -std=c11 -Wall -Wextra -O2 -I"$REPO/include" "$REPO/examples/c/nic_recv.c" "$lib" \
        -Wl,-rpath,"$BINDINGS" -o "$TW/nic_recv" >"$TW/cc.out" 2>&1 ||
        fail "compiling examples/c/nic_recv.c against $lib failed: $(zline "$TW/cc.out")"
      RX_PROG=("$TW/nic_recv" --timeout "$TMO")
      ;;
    python)
      need_python
      local so=$BINDINGS/lib_zcnet.so pkg=$TW/py
      # The package as maturin lays it out: python/zcnet with the extension inside it.
      if [ -e "$so" ]; then
        mkdir -p "$pkg/zcnet" &&
          ln -s "$REPO/crates/zcnet-py/python/zcnet/__init__.py" "$pkg/zcnet/__init__.py" &&
          ln -s "$so" "$pkg/zcnet/_zcnet.abi3.so" || fail "cannot lay out the Python package in $pkg"
        export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
      fi
      "$PYTHON" -c 'import zcnet' >"$TW/import.out" 2>&1 ||
        skip "zcnet's Python module cannot be imported ($(zline "$TW/import.out")): no $so ($hint), nor an installed zcnet (pip install ./crates/zcnet-py)"
      RX_PROG=("$PYTHON" "$REPO/crates/zcnet-py/examples/nic_recv.py" --timeout "$TMO")
      ;;
    *) fail "no binding named '$1' (rust, c, python)" ;;
  esac
}

# binding_case API MECH ARGS...: the API's program receives under nic setup with ARGS (rx_case);
# it must report API, MECH, verified, bytes the NIC wrote without a copy, and with a udmabuf
# bytes read back from it.
binding_case() {
  local api=$1 want=$2 q
  shift 2
  need_iface
  need_local
  need_remote
  case " $* " in
    *" udmabuf "*) [ -e /dev/udmabuf ] || skip "no /dev/udmabuf here (CONFIG_UDMABUF): a dma-buf of host memory needs it" ;;
  esac
  bindings_prog "$api"
  rx_case "$PORT" "$@"
  q=$RX_Q
  local f=$TW/recv.out got_api rx ver zc cp un dev secs
  got_api=$(py get "$f" last 'd.get("api")')
  rx=$(py get "$f" last 'd["rx"]')
  ver=$(py get "$f" last 'd["verified"]')
  zc=$(py get "$f" last 'd["zerocopy_bytes"]')
  cp=$(py get "$f" last 'd["copied_bytes"]')
  un=$(py get "$f" last 'd["unsteered"]')
  dev=$(py get "$f" last 'd["device_bytes"]')
  secs=$(py get "$f" last '"%.2f" % d["seconds"]')
  [ "$got_api" = "$api" ] || fail "the output is not the $api program's (api: $got_api)"
  [ "$rx" = "$want" ] || fail "received with $rx, not $want"
  [ "$ver" = true ] || fail "the $api program did not verify the pattern"
  [ "${zc:-0}" -gt 0 ] || fail "$want received nothing zero-copy ($cp B copied, $un B unsteered: is the flow steered to queue $q?)"
  case " $* " in
    *" udmabuf "*) [ "${dev:-0}" -gt 0 ] || fail "nothing was read back from the udmabuf (device_bytes $dev)" ;;
  esac
  pass "$api: $BYTES B verified on queue $q by $want in $secs s: $zc B zero-copy, $cp B copied, $dev B read back from a udmabuf, $un B unsteered; NIC restored"
}

t_lib_zcrx() { binding_case rust zcrx --rx zcrx; }
t_lib_devmem() { binding_case rust devmem --rx devmem --mem udmabuf; }
t_c_zcrx() { binding_case c zcrx --rx zcrx; }
t_c_zcrx_udmabuf() { binding_case c zcrx --rx zcrx --mem udmabuf; }
t_c_devmem() { binding_case c devmem --rx devmem --mem udmabuf; }
t_py_zcrx() { binding_case python zcrx --rx zcrx; }
t_py_devmem() { binding_case python devmem --rx devmem --mem udmabuf; }

