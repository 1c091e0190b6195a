#!/usr/bin/env python3
"""A real NCCL run over the zcnet plugin, against NCCL's own socket transport, on one machine.

    python3 scripts/nccl-torch-check.py path/to/libnccl-net-zcnet.so

Two processes share GPU 0 and look like two hosts to NCCL (each its own NCCL_HOSTID, with
NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1), so every byte crosses the network transport. For
each transport (NCCL_NET=Socket, then the plugin) it checks all_reduce and send/recv results
numerically, then times all_reduce at 64 MiB and 1 GiB and prints bus bandwidth and the CPU
seconds per operation of each process (NCCL's threads included), the ratio plugin / Socket, and
NCCL's own log line naming the network it used. Exit status: 0 all checks passed, 1 a check
failed, 77 no GPU or no PyTorch here.

Needs PyTorch with CUDA and NCCL. Untested until a GPU machine runs it (see docs/perf.md).
"""
import json
import os
import subprocess
import sys
import time

SIZES = [64 << 20, 1 << 30]


def worker():
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = 2
    torch.cuda.set_device(0)
    dist.init_process_group(
        "nccl",
        init_method="tcp://127.0.0.1:" + os.environ["CHECK_PORT"],
        rank=rank,
        world_size=world,
    )
    # Correctness: all_reduce of rank-dependent values, send/recv of a known tensor.
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    assert bool(torch.all(x == 3.0)), "all_reduce gave a wrong sum"
    t = torch.arange(1 << 22, device="cuda", dtype=torch.float32)
    if rank == 0:
        dist.send(t * 2.0, 1)
    else:
        r = torch.empty_like(t)
        dist.recv(r, 0)
        assert bool(torch.equal(r, t * 2.0)), "recv got different bytes than were sent"
    out = {}
    for size in SIZES:
        buf = torch.ones(size // 4, device="cuda")
        for _ in range(3):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        iters = 20 if size < (1 << 30) else 5
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / iters
        cpu = (time.process_time() - cpu0) / iters
        # all ones summed over 3 + 20 (or 5) rounds of two ranks: 2^(rounds) per element.
        expect = float(2 ** (3 + iters))
        assert float(buf[0]) == expect and float(buf[-1]) == expect, "all_reduce drifted"
        algbw = size / dt / 1e9
        out[str(size)] = {"busbw_gbps": algbw * 2 * (world - 1) / world, "cpu_s_per_op": cpu}
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def run(net, plugin, port):
    procs = []
    for rank in (0, 1):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            CHECK_ROLE="worker",
            CHECK_PORT=str(port),
            NCCL_HOSTID="zcnet-check-host-%d" % rank,
            NCCL_P2P_DISABLE="1",
            NCCL_SHM_DISABLE="1",
            NCCL_SOCKET_IFNAME="lo",
            ZCNET_NCCL_IFACE="=lo",
            NCCL_DEBUG="INFO",
            NCCL_DEBUG_SUBSYS="INIT,NET",
            NCCL_NET=net,
        )
        if plugin:
            env["NCCL_NET_PLUGIN"] = plugin
        else:
            env.pop("NCCL_NET_PLUGIN", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = []
    for p in procs:
        try:
            o, _ = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
        outs.append((p.returncode, o))
    ok = all(rc == 0 for rc, _ in outs)
    text = outs[0][1]
    result = next((json.loads(l[7:]) for l in text.splitlines() if l.startswith("RESULT ")), None)
    netline = next(
        (l.strip() for l in text.splitlines() if "Using network" in l or "NET/Plugin" in l),
        "(NCCL printed no network line)",
    )
    return ok and result is not None, result, netline, outs


def main():
    if os.environ.get("CHECK_ROLE") == "worker":
        worker()
        return 0
    if len(sys.argv) != 2 or not os.path.isfile(sys.argv[1]):
        print("usage: nccl-torch-check.py /abs/path/libnccl-net-zcnet.so (build it with scripts/nccl-plugin.sh)", file=sys.stderr)
        return 2
    try:
        import torch

        if not torch.cuda.is_available():
            print("nccl-torch-check: SKIP: PyTorch sees no CUDA device")
            return 77
    except ImportError:
        print("nccl-torch-check: SKIP: no PyTorch here")
        return 77
    plugin = os.path.abspath(sys.argv[1])
    runs = {}
    failed = False
    for i, (label, net, lib) in enumerate([("Socket", "Socket", None), ("zcnet", "zcnet", plugin)]):
        ok, result, netline, outs = run(net, lib, 29500 + i)
        runs[label] = result
        print("%-7s %-4s %s" % (label, "PASS" if ok else "FAIL", netline))
        if not ok:
            failed = True
            for rc, o in outs:
                print("--- rank exit %s, last lines:\n%s" % (rc, "\n".join(o.splitlines()[-15:])))
    if runs.get("Socket") and runs.get("zcnet"):
        print("%-8s %14s %14s %8s %16s %16s" % ("size", "Socket GB/s", "zcnet GB/s", "ratio", "Socket CPU s/op", "zcnet CPU s/op"))
        for size in SIZES:
            s, z = runs["Socket"][str(size)], runs["zcnet"][str(size)]
            print(
                "%-8s %14.2f %14.2f %7.2fx %16.4f %16.4f"
                % (
                    "%dM" % (size >> 20),
                    s["busbw_gbps"],
                    z["busbw_gbps"],
                    z["busbw_gbps"] / s["busbw_gbps"],
                    s["cpu_s_per_op"],
                    z["cpu_s_per_op"],
                )
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
