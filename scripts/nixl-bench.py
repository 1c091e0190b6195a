#!/usr/bin/env python3
"""NIXL's ZCNET backend against its UCX backend over TCP, side by side in one run (as root).

    scripts/nixl-bench.py [--net loopback|veth|both] [--sizes LIST] [--op WRITE|READ]
                          [--rounds R] [--min-bytes N] [--tx MODE] [--streams N] [--json]

Two agents of the stock nixl-cu12 1.5.1 wheel, each in a process of its own, move one
descriptor of each size per request (A's registered host memory to B's for WRITE, B's to A's
for READ), the same request posted again until --min-bytes have moved (at least 3 times, at
most 4,000), the initiator polling check_xfer_state without sleeping. Per size and round, the
ZCNET pair and the UCX pair (UCX_TLS=tcp) run back to back, in ABBA order over the rounds,
each while every other pair's agents are stopped (SIGSTOP: UCX's idle agents poll). The
agents run in namespaces made for the run and deleted on every exit path: for `loopback` both
in one namespace (its lo only), for `veth` one in each of two joined by a veth pair
(10.77.0.1 -> 10.77.0.2). UCX is told the device (UCX_NET_DEVICES), ZCNET the address
(ip_addr).

Prints each measurement, then per size the median GB/s (10^9 B/s) and CPU seconds per GB of
both agents' processes (every thread: NIXL's, the backend's and the polling loop; the kernel's
work done in their context, as on loopback, included), and the ratios ZCNET/UCX with the
targets of issue 35 (>= 1.5x from 1 MiB to 256 MiB, >= 1.0x at every size, less CPU per GB):
the ratios are what this run measured, not a claim about other machines. --json prints one
JSON document instead.

Needs: root; the wheel and numpy in the Python that runs it (`pip install --no-deps
nixl-cu12==1.5.1 numpy`); the plugin built in release (`cargo build --release -p zcnet-nixl`;
ZCNET_NIXL_PLUGIN names another). docs/perf.md has the runs made with it.
"""
import json
import math
import os
import pathlib
import signal
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "lib"))
sys.path.insert(0, str(REPO / "crates" / "zcnet-nixl" / "tests"))
from netns_pair import ADDR_A, ADDR_B, NetnsPair  # noqa: E402  (scripts/lib)
from oneline_args import OneLineParser, at_least, size_list  # noqa: E402

BACKENDS = ["ZCNET", "UCX"]
DEFAULT_SIZES = "4K,64K,1M,4M,16M,64M,256M"
def fmt_size(n):
    for u, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{u}"
    return str(n)


def cpu_of(workers):
    t = 0.0
    for w in workers:
        r = w.call(cmd="cpu")
        t += r["user"] + r["sys"]
    return t


class Pair:
    """The initiator A and the target B of one backend on one path."""

    def __init__(self, plugin_dir, backend, net, netns, bufsize, zparams):
        from nixl_procs import Worker

        if net == "loopback":
            where = [(netns.exec_a, "127.0.0.1", "lo"), (netns.exec_a, "127.0.0.1", "lo")]
        else:
            where = [(netns.exec_a, ADDR_A, netns.dev_a), (netns.exec_b, ADDR_B, netns.dev_b)]
        self.workers = []
        try:
            for name, (prefix, addr, dev) in zip("AB", where):
                if backend == "UCX":
                    env, params = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": dev}, {}
                else:
                    env, params = None, {"ip_addr": addr, **zparams}
                self.workers.append(
                    Worker(plugin_dir, name, bufsize, params, backend=backend, env=env, prefix=prefix)
                )
            self.a, self.b = self.workers
            if self.a.call(cmd="add_remote", md=self.b.md)["name"] != "B":
                raise RuntimeError(f"{backend}: agent A did not load B's metadata")
            if self.b.call(cmd="add_remote", md=self.a.md)["name"] != "A":
                raise RuntimeError(f"{backend}: agent B did not load A's metadata")
            self.a.call(cmd="fill", off=0, len=bufsize, seed=1)
            self.b.call(cmd="fill", off=0, len=bufsize, seed=2)
        except BaseException:
            self.close()
            raise

    def measure(self, op, size, reps):
        """(GB/s, CPU s per GB) of `reps` posts of one `size` descriptor."""
        c0 = cpu_of(self.workers)
        r = self.a.call(
            cmd="xfer", op=op, local=[[0, size]], remote=[[0, size]], remote_addr=self.b.addr,
            peer="B", repeat=reps, spin=True, timeout=300,
        )
        c1 = cpu_of(self.workers)
        if r["state"] != "DONE":
            raise RuntimeError(f"{op} of {fmt_size(size)} ended {r['state']}")
        gb = size * reps / 1e9
        return gb / r["seconds"], (c1 - c0) / gb

    def check(self, op, size):
        """The bytes arrived: the digests of both sides' first `size` bytes agree."""
        da = self.a.call(cmd="digest", off=0, len=size)["sha"]
        db = self.b.call(cmd="digest", off=0, len=size)["sha"]
        if da != db:
            raise RuntimeError(f"{op} of {fmt_size(size)}: the two buffers differ afterwards")

    def pause(self, stop=True):
        """Stops (SIGSTOP) or continues both agents' processes: a pair not being measured is
        stopped, as idle agents are not idle (UCX's poll: with the other pairs running, their
        threads took about 15 % of a CPU each here and slowed whichever pair was measured)."""
        for w in getattr(self, "workers", []):
            if w.proc.poll() is None:
                os.kill(w.proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)

    def close(self):
        self.pause(False)
        for w in getattr(self, "workers", []):
            w.close()


def main():
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--net", choices=["loopback", "veth", "both"], default="both")
    p.add_argument("--sizes", default=DEFAULT_SIZES)
    p.add_argument("--op", choices=["WRITE", "READ"], default="WRITE")
    p.add_argument("--rounds", type=at_least(1), default=3)
    p.add_argument("--min-bytes", default="512M")
    p.add_argument("--tx", choices=["auto", "copy", "uring", "uring-zc"], default="auto",
                   help="the ZCNET backend's send mode (its `tx` parameter; default auto)")
    p.add_argument("--streams", type=at_least(1), default=1,
                   help="the ZCNET backend's connections per peer (its `streams` parameter)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    try:
        sizes = size_list(a.sizes)
    except ValueError as e:
        p.error(f"--sizes {a.sizes}: {e}: give sizes like 4K,1M,256M")
    try:
        (min_bytes,) = size_list(a.min_bytes)
    except ValueError:
        p.error(f"--min-bytes {a.min_bytes}: give one size, like 512M")
    if os.geteuid() != 0:
        sys.exit("nixl-bench.py: needs root (it runs the agents in network namespaces it makes): run it with sudo")
    try:
        import nixl_cu12
    except ImportError as e:
        sys.exit(f"nixl-bench.py: the NIXL wheel is not importable ({e}): pip install --no-deps nixl-cu12==1.5.1 numpy")
    from nixl_procs import REPO as _repo, make_plugin_dir

    plugin = pathlib.Path(os.environ.get("ZCNET_NIXL_PLUGIN", _repo / "target" / "release" / "libplugin_ZCNET.so"))
    if not plugin.is_file():
        sys.exit(f"nixl-bench.py: {plugin} not found: cargo build --release -p zcnet-nixl (or set ZCNET_NIXL_PLUGIN)")
    nets = ["loopback", "veth"] if a.net == "both" else [a.net]
    bufsize = max(sizes) + 4096
    say = (lambda *x, **k: None) if a.json else print
    results = {}  # (net, size, backend) -> [(gbps, cpu_per_gb)]
    with tempfile.TemporaryDirectory(prefix="zcnet-nixl-bench-") as tmp:
        plugin_dir = make_plugin_dir(nixl_cu12, plugin, pathlib.Path(tmp))
        netns = NetnsPair(f"znb{os.getpid()}")
        pairs = {}
        try:
            netns.setup()
            for net in nets:
                for be in BACKENDS:
                    pairs[(net, be)] = Pair(plugin_dir, be, net, netns, bufsize,
                                                {"tx": a.tx, "streams": str(a.streams)})
            for rnd in range(a.rounds):
                for net in nets:
                    for size in sizes:
                        reps = min(4000, max(3, math.ceil(min_bytes / size)))
                        order = BACKENDS if rnd % 2 == 0 else BACKENDS[::-1]
                        for be in order:
                            pair = pairs[(net, be)]
                            others = [q for q in pairs.values() if q is not pair]
                            for q in others:
                                q.pause()
                            try:
                                gbps, cpu = pair.measure(a.op, size, reps)
                                pair.check(a.op, size)
                            finally:
                                for q in others:
                                    q.pause(False)
                            results.setdefault((net, size, be), []).append((gbps, cpu))
                            say(f"round {rnd + 1}: {net:8s} {a.op:5s} {fmt_size(size):>5s} x{reps:<4d} "
                                f"{be:5s} {gbps:7.3f} GB/s  {cpu:6.3f} CPU s/GB", flush=True)
        finally:
            for pair in pairs.values():
                pair.close()
            netns.teardown()
    rows = []
    for net in nets:
        for size in sizes:
            row = {"net": net, "op": a.op, "size": size}
            for be in BACKENDS:
                v = results[(net, size, be)]
                row[be] = {
                    "gbps": statistics.median(x[0] for x in v),
                    "cpu_s_per_gb": statistics.median(x[1] for x in v),
                }
            z, u = row["ZCNET"], row["UCX"]
            row["ratio"] = z["gbps"] / u["gbps"]
            row["cpu_ratio"] = z["cpu_s_per_gb"] / u["cpu_s_per_gb"]
            want = 1.5 if (1 << 20) <= size <= (256 << 20) else 1.0
            row["target"] = want
            row["met"] = row["ratio"] >= want and row["cpu_ratio"] < 1.0
            rows.append(row)
    if a.json:
        json.dump({"rounds": a.rounds, "min_bytes": min_bytes, "tx": a.tx, "streams": a.streams, "rows": rows}, sys.stdout, indent=1)
        print()
        return
    print(f"{a.op}, ZCNET tx={a.tx} streams={a.streams}, median of {a.rounds} rounds (GB/s = 10^9 B/s; CPU = both agents' processes):")
    print(f"  {'path':8s} {'size':>5s} {'ZCNET GB/s':>10s} {'UCX GB/s':>9s} {'ratio':>6s} "
          f"{'ZCNET CPU s/GB':>14s} {'UCX CPU s/GB':>12s} {'CPU ratio':>9s}  target")
    for r in rows:
        z, u = r["ZCNET"], r["UCX"]
        verdict = "met" if r["met"] else "NOT met"
        print(f"  {r['net']:8s} {fmt_size(r['size']):>5s} {z['gbps']:10.3f} {u['gbps']:9.3f} "
              f"{r['ratio']:5.2f}x {z['cpu_s_per_gb']:14.3f} {u['cpu_s_per_gb']:12.3f} "
              f"{r['cpu_ratio']:8.2f}x  >= {r['target']:.1f}x and less CPU: {verdict}")


if __name__ == "__main__":
    main()
