"""Receive one TCP stream on a NIC queue with zcnet.Receiver and check every byte.

    python3 nic_recv.py --listen IP:PORT --iface IF [--queue Q] [--rx zcrx|devmem|auto]
                        [--mem host|udmabuf] [--area BYTES] [--seed N] [--timeout SECONDS]

zcrx (io_uring zero-copy receive) into zcnet's host area (--mem host: each buffer is read in
place through buf.memoryview(), no copy) or into a udmabuf (--mem udmabuf: host pages the NIC
writes through a dma-buf; bytes(buf) copies each buffer out of it while it is lent), or devmem
TCP into a udmabuf. Every byte is compared with zcnet's seeded pattern (what `zcnet send --verify
--seed N` sends); the receiver's statistics are printed as one JSON object on stdout. The flow
must already be steered to the queue with header split on: `zcnet nic setup --iface IF --queue Q
--port PORT -- python3 nic_recv.py ...` (scripts/hw-suite.sh's py-zcrx and py-devmem run it so on
the software NIC, kmod/zcnic). Exit status: 0 verified; 1 a refusal, a wrong byte or the time
limit; 2 bad arguments (one line each).
"""

import json
import signal
import socket
import sys
import time

import zcnet

USAGE = (
    "nic_recv.py --listen IP:PORT --iface IF [--queue Q] [--rx zcrx|devmem|auto] "
    "[--mem host|udmabuf] [--area BYTES] [--seed N] [--timeout SECONDS]"
)


def bad(msg):
    print(f"nic_recv.py: {msg} (usage: {USAGE})", file=sys.stderr)
    sys.exit(2)


def number(flag, v):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(v[-1:].upper(), 1)
    digits = v[:-1] if mul > 1 else v
    if not digits.isdigit():
        bad(f"{flag} wants a number (K, M, G allowed), not {v!r}")
    return int(digits) * mul


def parse(argv):
    a = {"listen": None, "iface": None, "queue": None, "rx": "zcrx", "mem": "host", "area": None,
         "seed": 1, "timeout": 120}
    it = iter(argv)
    for flag in it:
        if flag in ("-h", "--help"):
            print(f"usage: {USAGE}")
            sys.exit(0)
        v = next(it, None)
        if v is None:
            bad(f"{flag} wants a value")
        key = flag[2:] if flag.startswith("--") else None
        if key not in a:
            bad(f"unknown argument {flag!r}")
        a[key] = number(flag, v) if key in ("queue", "area", "seed", "timeout") else v
    if a["listen"] is None:
        bad("--listen IP:PORT is needed")
    if a["iface"] is None:
        bad("--iface IF is needed: the NIC whose queue the flow is steered to")
    host, _, port = a["listen"].rpartition(":")
    if not host or not port.isdigit():
        bad(f"--listen wants IP:PORT, not {a['listen']!r}")
    if a["rx"] == "devmem" and a["mem"] != "udmabuf":
        bad("--rx devmem lands the payload in a dma-buf: add --mem udmabuf to read it back")
    if a["timeout"] <= 0:
        bad("--timeout wants whole seconds above 0")
    a["addr"] = (host.strip("[]"), int(port))
    return a


def main(argv):
    a = parse(argv)
    signal.alarm(a["timeout"])  # the time limit: SIGALRM's default action ends the process
    try:
        rx = zcnet.Receiver(mode=a["rx"], iface=a["iface"], queue=a["queue"], mem=a["mem"],
                            area=a["area"])
    except ValueError as e:  # an argument the binding refuses
        bad(str(e))
    ls = socket.create_server(a["addr"])
    print(f"nic_recv.py: listening on {a['listen']} with {rx.mode}", file=sys.stderr, flush=True)
    conn, _ = ls.accept()
    ls.close()
    rx.add(conn)  # zcnet takes the connection over
    got = device_bytes = 0
    start = None
    for buf in rx:
        start = start or time.monotonic()
        try:
            data = buf.memoryview()  # host memory: the bytes where the NIC (or kernel) put them
        except BufferError:
            data = bytes(buf)  # in the udmabuf: copied out while the buffer is lent
            device_bytes += len(buf)
        want = zcnet.pattern(a["seed"], buf.offset, len(buf))
        if data != want:
            i = next(i for i in range(len(buf)) if data[i] != want[i])
            print(f"nic_recv.py: wrong byte at stream offset {buf.offset + i}: "
                  f"{data[i]:#04x}, not {want[i]:#04x}", file=sys.stderr)
            return 1
        got += len(buf)
        del data, buf  # the buffer goes back to the kernel
    if got == 0:
        print("nic_recv.py: nothing to verify: 0 B of payload arrived", file=sys.stderr)
        return 1
    s = rx.stats()
    print(json.dumps({
        "api": "python", "rx": s["mode"], "mem": s["mem"], "bytes": got,
        "seconds": time.monotonic() - start, "verified": True,
        "zerocopy_bytes": s["zerocopy_bytes"], "copied_bytes": s["copied_bytes"],
        "device_bytes": device_bytes, "unsteered": s["unsteered"],
        "linear_fallbacks": s["linear_fallbacks"], "buffers": s["buffers"],
    }))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except zcnet.Error as e:
        print(f"nic_recv.py: {e}", file=sys.stderr)
        sys.exit(1)
