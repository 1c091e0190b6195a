#!/usr/bin/env python3
"""The Python binding against the zcnet CLI over loopback or a veth pair.

    scripts/py-bench.py ZCNET [--bytes 4G] [--rounds 3] [--buf-size N] [--path loopback|veth]

--path veth (as root): a veth pair with one end in a network namespace made for the run
(zcpyb<pid>, 10.231.7.1/30 here and .2 there); every sender runs in the namespace, every
receiver here; both are deleted on every exit path. Loopback (default) uses 127.0.0.1 (below,
127.0.0.1 stands for the receiver's address).

ZCNET is a built zcnet binary (target/release/zcnet); the `zcnet` module is the one installed in
the interpreter running this script (`pip install ./crates/zcnet-py`). Nothing is built here.
Every sender sends 64 KiB messages. Each round runs every case once, in turn (interleaved):

receive (sender: `zcnet send 127.0.0.1:P --tx copy --size 64K --bytes N`)
  cli-recv   `zcnet recv --listen 127.0.0.1:P --discard`
  py-recv    `zcnet.Receiver()` (mode auto, the binding's defaults: 64 KiB buffers, automatic
             receive low-water mark); each buffer is touched: `np.from_dlpack(buf)`, then
             `view[::4096].sum()` (one byte per 4 KiB page is read and summed) and dropped
  py-lowat   as py-recv with a fixed mark: `Receiver(low_water=131072)` (what `zcnet recv
             --discard` sets)
  py-16k     as py-recv with the library's defaults, the binding's before:
             `Receiver(buf_size=16384, low_water=0)` (16 KiB buffers, no mark)
  recv_into  the usual Python loop: `sock.recv_into(mv)` into a preallocated 64 KiB bytearray,
             touched the same way (`arr[:n:4096].sum()` over an np.frombuffer view of it)
send (receiver: `zcnet recv --listen 127.0.0.1:P --discard`)
  cli-send   `zcnet send 127.0.0.1:P --tx copy --size 64K --bytes N`
  py-send    `zcnet.Sender(sock, mode="copy").send(a)` with one 64 KiB numpy array, repeated
             N / 64 KiB times, then `finish()`

GPU memory (cases not in the default list; --cases picks them; the device is CUDA device 0,
allocated with zcnet.cuda_buffer, i.e. zcnet's CUDA driver wrapper, so no torch is needed):
receive (sender as above)
  cli-recv-cuda   `zcnet recv --listen 127.0.0.1:P --mem cuda:0` (staged into GPU memory)
  cuda-recv       `Receiver().recv_into(dst)` into a 64 MiB device buffer, again until it
                  returns less than 64 MiB (each received host buffer copied to the device;
                  --py-kw applies)
  cuda-recv_into  the loop Python users write (Mooncake's TCP transport does this):
                  `sock.recv_into` a preallocated 64 MiB bytearray until it is full, then one
                  synchronous host-to-device copy of it (`dst.fill(view)`, cuMemcpyHtoD)
send (receiver: `zcnet recv --discard` as above)
  cli-send-cuda   `zcnet send 127.0.0.1:P --mem cuda:0 --size 64K --bytes N` (staged)
  cuda-send       `Sender(sock, mode=TX).send(src)` with one 64 MiB device buffer, repeated
  cuda-send-naive one synchronous device-to-host copy of the 64 MiB (`src.tobytes()`), then
                  `sock.sendall` of it, repeated

--tx MODE makes every sender use MODE instead of copy (`zcnet send --tx MODE`,
`Sender(sock, mode=MODE)`).

The Python processes run with OPENBLAS_NUM_THREADS=1 unless it is set: numpy's OpenBLAS
threads otherwise spin after import (5.7 % of all samples in `perf record -a` of a py-recv run
on 2 vCPUs), CPU the sender and the receiver share.

A rate is bytes / wall seconds from the moment the sender is started (the Python processes
are started and ready before that) to the moment the receiver has seen the end of the stream.
Prints each run, then the median per case and the ratios the issue asks for.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

MSG = 64 * 1024
# The device buffer of the GPU cases.
CUDA_CHUNK = 64 << 20
CUDA_RECV = ("cuda-recv", "cuda-recv_into")
CUDA_SEND = ("cuda-send", "cuda-send-naive")
# The cases whose receiver, or sender, is a Python process of this script (`--role CASE`).
PY_RECV = ("py-recv", "py-lowat", "py-16k", "recv_into") + CUDA_RECV
PY_SEND = ("py-send",) + CUDA_SEND
TOUCH_STEP = 4096
# The receiver's address, and the command prefix that runs a sender (the veth namespace's).
HOST = "127.0.0.1"
NS_EXEC = []

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from oneline_args import OneLineParser, at_least, size_list  # noqa: E402  (scripts/lib, beside this script)


def ip(*args):
    subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def veth_up():
    """Makes the namespace and the veth pair; returns the function that deletes both."""
    global HOST, NS_EXEC
    ns, here, there = f"zcpyb{os.getpid()}", f"zpb{os.getpid()}h", f"zpb{os.getpid()}n"

    def down():
        subprocess.run(["ip", "link", "del", here], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)

    try:
        ip("netns", "add", ns)
        ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
        ip("addr", "add", "10.231.7.1/30", "dev", here)
        ip("link", "set", here, "up")
        ip("-n", ns, "addr", "add", "10.231.7.2/30", "dev", there)
        ip("-n", ns, "link", "set", there, "up")
        ip("-n", ns, "link", "set", "lo", "up")
    except BaseException:
        down()
        raise
    HOST, NS_EXEC = "10.231.7.1", ["ip", "netns", "exec", ns]
    return down


# ---- child roles (run as `py-bench.py --role ROLE ...` by the parent) ----


def child_recv(role, buf_size, py_kw):
    import numpy as np

    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((HOST, 0))
    ls.listen(1)
    print(json.dumps({"port": ls.getsockname()[1]}), flush=True)
    conn, _ = ls.accept()
    c0 = os.times()
    t0 = time.perf_counter()
    total = 0
    acc = 0
    t_touch = 0.0
    nbufs = 0
    if role in CUDA_RECV:
        import zcnet

        dst = zcnet.cuda_buffer(CUDA_CHUNK)
        if role == "cuda-recv":
            rx = zcnet.Receiver(**json.loads(py_kw))
            rx.add(conn)
            while True:
                n = rx.recv_into(dst)
                total += n
                nbufs += 1
                if n < CUDA_CHUNK:
                    break
            # (absent from bindings before the asynchronous copies)
            device_copies = rx.stats().get("device_copies")
        else:
            ba = bytearray(CUDA_CHUNK)
            mv = memoryview(ba)
            eof = False
            while not eof:
                n = 0
                while n < CUDA_CHUNK:
                    k = conn.recv_into(mv[n:])
                    if k == 0:
                        eof = True
                        break
                    n += k
                if n:
                    dst.fill(mv[:n])
                    total += n
                    nbufs += 1
        # One byte per 4 KiB page of the last chunk, read back, keeps the copies honest.
        acc = sum(dst.tobytes()[::TOUCH_STEP])
    elif role == "recv_into":
        ba = bytearray(MSG)
        mv = memoryview(ba)
        arr = np.frombuffer(ba, dtype=np.uint8)
        while True:
            n = conn.recv_into(mv)
            if n == 0:
                break
            total += n
            nbufs += 1
            acc += int(arr[:n:TOUCH_STEP].sum())
    else:
        import zcnet

        kw = {"buf_size": buf_size} if buf_size else {}
        if role == "py-lowat":
            kw["low_water"] = 128 * 1024
        elif role == "py-16k":
            kw = {"buf_size": 16384, "low_water": 0}
        if role == "py-recv":
            kw.update(json.loads(py_kw))
        rx = zcnet.Receiver(kw.pop("mode", "auto"), **kw)
        rx.add(conn)
        it = iter(rx)
        t_next = 0.0
        pc = time.perf_counter
        while True:
            a = pc()
            buf = next(it, None)
            b = pc()
            t_next += b - a
            if buf is None:
                break
            view = np.from_dlpack(buf)
            acc += int(view[::TOUCH_STEP].sum())
            total += len(view)
            nbufs += 1
            del view, buf
            t_touch += pc() - b
    t1 = time.perf_counter()
    cpu = os.times()
    out = {"bytes": total, "seconds": t1 - t0, "buffers": nbufs, "sum": acc, "cpu_s": cpu.user + cpu.system - c0.user - c0.system}
    if role == "cuda-recv" and device_copies:
        out["device_copies"] = device_copies
    if role not in ("recv_into",) + CUDA_RECV:
        out["next_s"] = t_next
        out["touch_s"] = t_touch
        st = rx.stats()
        out["mode"] = st.get("mode")
        out["marks"] = f"{st.get('low_water')}: raised {st.get('low_water_raises')}x, lowered {st.get('low_water_lowers')}x"
    print(json.dumps(out), flush=True)


def child_send(role, port, nbytes, mode):
    import numpy as np
    import zcnet

    if role in CUDA_SEND:
        a = zcnet.cuda_buffer(CUDA_CHUNK)
        a.fill(np.arange(CUDA_CHUNK, dtype=np.uint8))
    else:
        a = np.arange(MSG, dtype=np.uint8)
    print(json.dumps({"ready": True}), flush=True)
    sys.stdin.readline()
    s = socket.create_connection((HOST, port))
    t0 = time.perf_counter()
    n = 0
    if role == "cuda-send-naive":
        while n < nbytes:
            s.sendall(a.tobytes())
            n += CUDA_CHUNK
        s.close()
        st = {"mode": "sendall"}
    else:
        tx = zcnet.Sender(s, mode=mode)
        while n < nbytes:
            n += tx.send(a)
        st = tx.finish()
    print(json.dumps({"bytes": n, "seconds": time.perf_counter() - t0, "mode": st.get("mode")}), flush=True)


# ---- the parent ----


def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_listening(port, deadline=5.0):
    # zcnet recv prints nothing before it accepts: poll /proc/net/tcp for the listener.
    hexport = f"{port:04X}"
    end = time.time() + deadline
    while time.time() < end:
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[1].endswith(":" + hexport) and parts[3] == "0A":
                    return
        time.sleep(0.01)
    raise RuntimeError(f"nothing listens on {HOST}:{port}")


def cli_recv_cmd(a, port, cuda=False):
    cmd = [a.zcnet, "recv", "--listen", f"{HOST}:{port}", "--json"] + (["--mem", "cuda:0"] if cuda else ["--discard"])
    if a.buf_size:
        cmd += ["--buf-size", str(a.buf_size)]
    return cmd


def cli_send_cmd(a, port, cuda=False):
    mem = ["--mem", "cuda:0"] if cuda else []
    return NS_EXEC + [a.zcnet, "send", f"{HOST}:{port}", "--tx", a.tx, "--size", "64K", "--bytes", str(a.nbytes)] + mem


# The environment of the Python roles (see the module documentation).
PY_ENV = dict(os.environ, OPENBLAS_NUM_THREADS=os.environ.get("OPENBLAS_NUM_THREADS", "1"))


def run_case(case, a):
    me = [sys.executable, os.path.abspath(__file__)]
    info = {}
    if case in ("cli-recv", "cli-send", "cli-recv-cuda", "cli-send-cuda"):
        port = free_port()
        rcv = subprocess.Popen(cli_recv_cmd(a, port, case == "cli-recv-cuda"), stdout=subprocess.PIPE, text=True)
        wait_listening(port)
        if case in ("cli-recv", "cli-recv-cuda"):
            t0 = time.perf_counter()
            snd = subprocess.Popen(cli_send_cmd(a, port), stdout=subprocess.DEVNULL)
        else:
            snd = None
    if case in PY_RECV:
        args = ["--role", case, "--host", HOST, "--py-kw", a.py_kw] + (["--buf-size", str(a.buf_size)] if a.buf_size else [])
        rcv = subprocess.Popen(me + args, stdout=subprocess.PIPE, text=True, env=PY_ENV)
        port = json.loads(rcv.stdout.readline())["port"]
        t0 = time.perf_counter()
        snd = subprocess.Popen(cli_send_cmd(a, port), stdout=subprocess.DEVNULL)
        info = json.loads(rcv.stdout.readline())
        t1 = time.perf_counter()
        rcv.wait()
        snd.wait()
    elif case in ("cli-recv", "cli-recv-cuda"):
        out = rcv.stdout.read()
        # Reaped here for its CPU time (user + system), which Popen.wait would not give.
        _, status, ru = os.wait4(rcv.pid, 0)
        t1 = time.perf_counter()
        rcv.returncode = os.waitstatus_to_exitcode(status)
        snd.wait()
        info = {"bytes": json.loads(out).get("bytes", a.nbytes)} if out.strip().startswith("{") else {}
        info["cpu_s"] = ru.ru_utime + ru.ru_stime
    elif case in ("cli-send", "cli-send-cuda"):
        t0 = time.perf_counter()
        snd = subprocess.Popen(cli_send_cmd(a, port, case == "cli-send-cuda"), stdout=subprocess.DEVNULL)
        rcv.communicate()
        t1 = time.perf_counter()
        snd.wait()
    elif case in PY_SEND:
        port = free_port()
        rcv = subprocess.Popen(cli_recv_cmd(a, port), stdout=subprocess.PIPE, text=True)
        wait_listening(port)
        snd = subprocess.Popen(
            NS_EXEC + me + ["--role", case, "--host", HOST, "--port", str(port), "--bytes", str(a.nbytes), "--tx", a.tx],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=PY_ENV,
        )
        snd.stdout.readline()
        t0 = time.perf_counter()
        snd.stdin.write("go\n")
        snd.stdin.flush()
        rcv.communicate()
        t1 = time.perf_counter()
        info = json.loads(snd.stdout.readline())
        snd.wait()
    if rcv.returncode or snd.returncode:
        raise RuntimeError(f"{case}: exit {rcv.returncode}/{snd.returncode}")
    secs = t1 - t0
    return a.nbytes / secs / 1e6, secs, info


def run_rounds(a, zcnet):
    print(f"zcnet module {zcnet.__file__}; binary {a.zcnet}; path {a.path} ({HOST}); {a.nbytes} B per run, 64 KiB messages, {a.rounds} rounds")
    cases = a.cases.split(",")
    rates = {c: [] for c in cases}
    for r in range(a.rounds):
        for c in cases:
            mbs, secs, info = run_case(c, a)
            rates[c].append(mbs)
            extra = ""
            if "next_s" in info:
                extra = (f"  [mode {info['mode']}, mark {info['marks']}, {info['buffers']} buffers of {info['bytes'] // max(info['buffers'], 1)} B avg; "
                         f"in next(): {info['next_s']:.2f} s, from_dlpack+touch+drop: {info['touch_s']:.2f} s, "
                         f"{1e6 * info['touch_s'] / max(info['buffers'], 1):.2f} us/buffer; receiver CPU {info['cpu_s']:.2f} s]")
            elif "cpu_s" in info and "buffers" not in info:
                extra = f"  [receiver CPU {info['cpu_s']:.2f} s]"
            elif "buffers" in info:
                extra = (f"  [{info['buffers']} recv_into calls, {info['bytes'] // max(info['buffers'], 1)} B avg; "
                         f"receiver CPU {info['cpu_s']:.2f} s]")
            if "device_copies" in info:
                dc = info["device_copies"]
                extra += (f"  [to the GPU: {dc['async_bytes']} B by asynchronous copies, {dc['sync_bytes']} B synchronously"
                          + (f"; no asynchronous copies: {dc['async_refused']}" if dc["async_refused"] else "") + "]")
            print(f"round {r + 1} {c:10s} {mbs:9.0f} MB/s  ({secs:.3f} s){extra}", flush=True)
    return rates


def main():
    p = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("zcnet", nargs="?")
    p.add_argument("--bytes", default="4G")
    p.add_argument("--rounds", type=at_least(1), default=3)
    p.add_argument("--buf-size", type=at_least(0), default=0, help="Receiver buf_size and recv --buf-size (default: theirs)")
    p.add_argument("--cases", default="cli-recv,py-recv,py-lowat,py-16k,recv_into,cli-send,py-send")
    p.add_argument("--py-kw", default="{}", help="py-recv and cuda-recv only: extra Receiver keywords, as JSON (e.g. '{\"buffers\": 32}')")
    p.add_argument("--path", choices=["loopback", "veth"], default="loopback")
    p.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    p.add_argument("--tx", default="copy", help="the send mode of every sender, zcnet send's and Python's (default copy)")
    p.add_argument("--role")
    p.add_argument("--port", type=int)
    a = p.parse_args()
    try:
        (a.nbytes,) = size_list(a.bytes)
    except ValueError:
        p.error(f"--bytes '{a.bytes}': give a size above 0, e.g. 4G, 512M or 1048576")
    try:
        json.loads(a.py_kw)
    except ValueError as e:
        p.error(f"--py-kw '{a.py_kw}' is not JSON ({e}): give an object, e.g. '{{\"buffers\": 32}}'")
    known = ("cli-recv", "cli-send", "cli-recv-cuda", "cli-send-cuda") + PY_RECV + PY_SEND
    for c in a.cases.split(","):
        if c not in known:
            p.error(f"--cases: no case named '{c}': use {', '.join(known)}")
    global HOST
    HOST = a.host
    if a.role in PY_RECV:
        return child_recv(a.role, a.buf_size, a.py_kw)
    if a.role in PY_SEND:
        return child_send(a.role, a.port, a.nbytes, a.tx)
    if not a.zcnet:
        p.error("the zcnet binary is required")
    import zcnet

    down = None
    if a.path == "veth":
        # SIGTERM/SIGHUP end the run through the finally below (Ctrl-C does already).
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: sys.exit(1))
        down = veth_up()
    try:
        rates = run_rounds(a, zcnet)
    finally:
        if down:
            down()
    med = {c: statistics.median(v) for c, v in rates.items()}
    print("medians (MB/s):", ", ".join(f"{c} {m:.0f}" for c, m in med.items()))

    def ratio(x, y, target):
        if x in med and y in med:
            q = med[x] / med[y]
            print(f"  {x} / {y} = {q:.2f}  (target >= {target}: {'met' if q >= target else 'NOT met'})")

    ratio("py-recv", "cli-recv", 0.9)
    ratio("py-lowat", "cli-recv", 0.9)
    ratio("py-16k", "cli-recv", 0.9)
    ratio("py-recv", "recv_into", 1.5)
    ratio("py-lowat", "recv_into", 1.5)
    ratio("py-send", "cli-send", 0.9)
    ratio("cuda-recv", "cli-recv-cuda", 0.9)
    ratio("cuda-recv", "cuda-recv_into", 1.5)
    ratio("cuda-send", "cli-send-cuda", 0.9)
    ratio("cuda-send", "cuda-send-naive", 1.5)


if __name__ == "__main__":
    main()
