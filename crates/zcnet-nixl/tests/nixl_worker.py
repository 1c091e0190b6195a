"""One NIXL agent in its own process, driven by the tests over stdin/stdout (one JSON object per
line each way). It uses the stock wheel's Python API only: what a NIXL user writes."""

import base64
import ctypes
import gc
import hashlib
import json
import os
import socket
import sys
import time

import numpy as np
from nixl_cu12 import nixl_agent, nixl_agent_config


# NIXL logs to stdout too: replies are the lines that start with this.
TAG = "zcnet-nixl-reply "


def reply(**kw):
    sys.stdout.write(TAG + json.dumps(kw) + "\n")
    sys.stdout.flush()


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def tcp_sockets():
    """This process's TCP sockets, in its network namespace: [local, remote, state] each, the
    addresses as "IP:PORT" (from /proc/self/net/tcp{,6}, matched by the fds' inodes)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[len("socket:[") : -1])

    def addr(hexa, fam):
        ip, port = hexa.split(":")
        raw = bytes.fromhex(ip)
        # The kernel prints each 32-bit word in host (little-endian) order.
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
        return f"{socket.inet_ntop(fam, raw)}:{int(port, 16)}"

    out = []
    for path, fam in (("/proc/self/net/tcp", socket.AF_INET), ("/proc/self/net/tcp6", socket.AF_INET6)):
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                x = line.split()
                if x[9] in inodes:
                    out.append([addr(x[1], fam), addr(x[2], fam), "LISTEN" if x[3] == "0A" else x[3]])
    return out


class Cuda:
    """Device memory through the CUDA driver library zcnet loads too ($ZCNET_LIBCUDA: in the
    tests, zcnet's stand-in, whose device memory the CPU cannot touch): cuda:0's primary
    context made current on this thread, allocations, and synchronous copies to fill and read
    back what the backend moved."""

    def __init__(self):
        # ZCNET_TEST_LIBCUDA: this worker's own driver, when a test points zcnet elsewhere.
        path = os.environ.get("ZCNET_TEST_LIBCUDA") or os.environ.get("ZCNET_LIBCUDA")
        if not path:
            raise RuntimeError("VRAM memory needs ZCNET_LIBCUDA (the driver library to use)")
        lib = ctypes.CDLL(path)
        u64, sz, vp = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), sz]
        lib.cuMemFree_v2.argtypes = [u64]
        lib.cuMemcpyHtoD_v2.argtypes = [u64, vp, sz]
        lib.cuMemcpyDtoH_v2.argtypes = [vp, u64, sz]
        self.lib = lib
        self.dev = ctypes.c_int()
        self.ctx = vp()
        self.check("cuInit", lib.cuInit(0))
        self.check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(self.dev), 0))
        self.check("cuDevicePrimaryCtxRetain",
                   lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev))
        self.check("cuCtxSetCurrent", lib.cuCtxSetCurrent(self.ctx))

    @staticmethod
    def check(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what}: CUresult {rc}")

    def alloc(self, n):
        p = ctypes.c_uint64()
        self.check("cuMemAlloc", self.lib.cuMemAlloc_v2(ctypes.byref(p), n))
        return p.value

    def to_device(self, dst, host):
        self.check("cuMemcpyHtoD", self.lib.cuMemcpyHtoD_v2(dst, host.ctypes.data, host.nbytes))

    def to_host(self, src, n):
        out = np.empty(n, dtype=np.uint8)
        self.check("cuMemcpyDtoH", self.lib.cuMemcpyDtoH_v2(out.ctypes.data, src, n))
        return out

    def free(self, p):
        self.check("cuMemFree", self.lib.cuMemFree_v2(p))

    def close(self):
        self.check("cuDevicePrimaryCtxRelease", self.lib.cuDevicePrimaryCtxRelease_v2(self.dev))


class Host:
    """A registered host buffer (NIXL's DRAM)."""

    def __init__(self, n):
        self.buf = np.zeros(n, dtype=np.uint8)
        self.addr = self.buf.ctypes.data

    def fill(self, off, n, data):
        self.buf[off : off + n] = data

    def read(self, off, n):
        return self.buf[off : off + n]


class Device:
    """A registered device buffer (NIXL's VRAM), on cuda:0."""

    def __init__(self, cuda, n):
        self.cuda, self.n = cuda, n
        self.addr = cuda.alloc(n)

    def fill(self, off, n, data):
        self.cuda.to_device(self.addr + off, np.ascontiguousarray(data))

    def read(self, off, n):
        return self.cuda.to_host(self.addr + off, n)


def main():
    agent = None
    backend = "ZCNET"
    posted = {}
    mems = {}  # "DRAM" / "VRAM" -> Host / Device
    regs = []
    cuda = None

    def request(c):
        """A request of command `c`: its descriptors as [offset, length] pairs in this agent's
        memory `local_mem` and the peer's `remote_mem` at `remote_addr` (DRAM by default)."""
        lm, rm = c.get("local_mem", "DRAM"), c.get("remote_mem", "DRAM")
        base = mems[lm].addr
        local = agent.get_xfer_descs([(base + o, n, 0) for o, n in c["local"]], lm)
        remote = agent.get_xfer_descs([(c["remote_addr"] + o, n, 0) for o, n in c["remote"]], rm)
        return agent.initialize_xfer(
            c["op"], local, remote, c["peer"], c.get("notif", "").encode(), backends=[backend]
        )

    def wait(h, timeout, nap=0.0005):
        state = agent.check_xfer_state(h)
        deadline = time.monotonic() + timeout
        while state == "PROC" and time.monotonic() < deadline:
            if nap:
                time.sleep(nap)
            state = agent.check_xfer_state(h)
        return state

    for line in sys.stdin:
        c = json.loads(line)
        cmd = c["cmd"]
        try:
            if cmd == "init":
                # The backend under test; UCX (with UCX_TLS=tcp) is the reference.
                backend = c.get("backend", "ZCNET")
                agent = nixl_agent(c["name"], nixl_agent_config(backends=[]))
                agent.create_backend(backend, c.get("params", {}))
                mems["DRAM"] = Host(c["size"])
                if c.get("vram"):
                    # `vram` bytes of device memory, registered as NIXL's VRAM on device 0.
                    cuda = Cuda()
                    mems["VRAM"] = Device(cuda, c["vram"])
                for kind, m in mems.items():
                    n = m.buf.nbytes if kind == "DRAM" else m.n
                    regs.append(
                        agent.register_memory([(m.addr, n, 0, "")], kind, backends=[backend])
                    )
                reply(
                    md=base64.b64encode(agent.get_agent_metadata()).decode(),
                    addr=mems["DRAM"].addr,
                    vaddr=mems["VRAM"].addr if "VRAM" in mems else 0,
                    plugins=agent.get_plugin_list(),
                )
            elif cmd == "add_remote":
                name = agent.add_remote_agent(base64.b64decode(c["md"]))
                reply(name=name.decode() if isinstance(name, bytes) else name)
            elif cmd == "remove_remote":
                agent.remove_remote_agent(c["name"])
                reply(ok=True)
            elif cmd == "fill":
                mems[c.get("mem", "DRAM")].fill(c["off"], c["len"], pattern(c["seed"], c["len"]))
                reply(ok=True)
            elif cmd == "digest":
                data = mems[c.get("mem", "DRAM")].read(c["off"], c["len"])
                reply(sha=hashlib.sha256(memoryview(np.ascontiguousarray(data))).hexdigest())
            elif cmd == "xfer":
                t0 = time.monotonic()
                h = request(c)
                # `repeat`: the same handle posted again once done (NIXL's repost), the buffer
                # refilled with the next seed before each repost when `refill` is given.
                for i in range(c.get("repeat", 1)):
                    if i and "refill" in c:
                        o, n = c["refill"]
                        mems[c.get("local_mem", "DRAM")].fill(o, n, pattern(c["seed"] + i, n))
                    state = agent.transfer(h)
                    # `spin`: poll without sleeping, as a user after the lowest latency does
                    # (scripts/nixl-bench.py); else a short sleep between polls.
                    if state == "PROC":
                        state = wait(h, c.get("timeout", 60), 0 if c.get("spin") else 0.0005)
                    if state != "DONE":
                        break
                secs = time.monotonic() - t0
                agent.release_xfer_handle(h)
                reply(state=state, seconds=secs)
            elif cmd == "post":
                # Posts a request and returns at once; "wait" finishes it.
                h = request(c)
                posted[id(h)] = h
                reply(id=id(h), state=agent.transfer(h))
            elif cmd == "post_many":
                # Posts every request of `reqs` before waiting for any; "wait_all" finishes them.
                ids, states = [], []
                for q in c["reqs"]:
                    h = request(q)
                    posted[id(h)] = h
                    ids.append(id(h))
                    states.append(agent.transfer(h))
                reply(ids=ids, states=states)
            elif cmd == "wait":
                h = posted.pop(c["id"])
                state = wait(h, c.get("timeout", 60), 0.001)
                agent.release_xfer_handle(h)
                reply(state=state)
            elif cmd == "wait_all":
                # Each request's final state, in the order of `ids` (one deadline for all).
                deadline = time.monotonic() + c.get("timeout", 60)
                states = []
                for i in c["ids"]:
                    h = posted.pop(i)
                    states.append(wait(h, max(0.0, deadline - time.monotonic()), 0.0005))
                    agent.release_xfer_handle(h)
                reply(states=states)
            elif cmd == "post_release":
                # Posts a request and releases it at once, before it can complete.
                h = request(c)
                state = agent.transfer(h)
                agent.release_xfer_handle(h)
                reply(state=state)
            elif cmd == "cpu":
                # This process's CPU time so far, all its threads (NIXL's and the backend's).
                t = os.times()
                reply(user=t.user, sys=t.system)
            elif cmd == "sockets":
                reply(sockets=tcp_sockets())
            elif cmd == "send_notif":
                # (1.5.1's send_notif(..., backend=) passes the handle where the binding wants a
                # list: without it, the agent picks the one backend with notifications.)
                agent.send_notif(c["peer"], c["msg"].encode())
                reply(ok=True)
            elif cmd == "notifs":
                got = []
                deadline = time.monotonic() + c.get("timeout", 30)
                while len(got) < c["want"] and time.monotonic() < deadline:
                    for peer, msgs in agent.get_new_notifs().items():
                        got += [[peer, m.decode()] for m in msgs]
                    if len(got) < c["want"]:
                        time.sleep(0.001)
                reply(notifs=got)
            elif cmd == "quit":
                for reg in regs:
                    agent.deregister_memory(reg, backends=[backend])
                if backend == "UCX":
                    # The wheel's UCX backend crashes the process when the agent is destroyed
                    # (SIGSEGV at exit, ZCNET loaded or not): the reference leaves at once.
                    reply(ok=True)
                    os._exit(0)
                # The engine's destructor runs now (its threads joined, sockets closed): a hang
                # here fails the test by its timeout.
                del agent
                gc.collect()
                if cuda is not None:
                    # Everything of the driver's is given back: the stand-in fails the process
                    # at exit (status 86) for anything the backend or this worker leaked.
                    cuda.free(mems["VRAM"].addr)
                    cuda.close()
                reply(ok=True)
                return
            else:
                reply(error=f"unknown command {cmd}")
        except Exception as e:  # reported to the test, which fails with it
            reply(error=f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
