#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Send or receive a known byte pattern over TCP, for the zcnic proofs.

    zcnic-send.py HOST PORT BYTES [--pattern ncdevmem|zcrx] [--chunk N]
    zcnic-send.py --listen PORT [BYTES] [--pattern ...] [--save FILE]
        (receive until EOF; with BYTES check the pattern; print the count)

Patterns: `ncdevmem` is what ncdevmem -v 7 checks (bytes 1..6 then a newline,
repeated), `zcrx` what liburing's examples/zcrx -v checks ('a' + offset % 26).
The sender retries the connection for a while (the receiver may still be
starting in a slow guest).
"""
import argparse
import socket
import sys
import time


def pattern(name, n):
    if name == "ncdevmem":
        unit = bytes([1, 2, 3, 4, 5, 6, 10])
    else:
        unit = bytes(ord("a") + i for i in range(26))
    reps = n // len(unit) + 1
    return (unit * reps)[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", action="store_true")
    ap.add_argument("--pattern", default="zcrx", choices=["ncdevmem", "zcrx"])
    ap.add_argument("--chunk", type=int, default=65536)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--save")
    ap.add_argument("args", nargs="+")
    a = ap.parse_args()
    if a.listen:
        port = int(a.args[0])
        n = int(a.args[1]) if len(a.args) > 1 else None
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(1)
        conn, _ = srv.accept()
        got = bytearray()
        while True:
            b = conn.recv(1 << 20)
            if not b:
                break
            got += b
        if a.save:
            with open(a.save, "wb") as f:
                f.write(got)
        if n is None:
            print(f"zcnic-send: received {len(got)} bytes")
            return 0
        ok = bytes(got) == pattern(a.pattern, n)
        print(f"zcnic-send: received {len(got)} bytes, pattern {'ok' if ok else 'MISMATCH'}")
        return 0 if ok else 1
    host, port, n = a.args[0], int(a.args[1]), int(a.args[2])
    data = pattern(a.pattern, n)
    deadline = time.monotonic() + a.timeout
    while True:
        try:
            s = socket.create_connection((host, port), timeout=a.timeout)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for off in range(0, n, a.chunk):
        s.sendall(data[off:off + a.chunk])
    s.shutdown(socket.SHUT_WR)
    s.settimeout(a.timeout)
    while s.recv(4096):
        pass
    s.close()
    print(f"zcnic-send: sent {n} bytes to {host}:{port}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
