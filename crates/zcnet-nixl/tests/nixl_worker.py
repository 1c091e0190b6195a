"""One NIXL agent in its own process, driven by the tests over stdin/stdout (one JSON object per
line each way). It uses the stock wheel's Python API only: what a NIXL user writes."""

import base64
import gc
import hashlib
import json
import os
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


def main():
    agent = None
    backend = "ZCNET"
    posted = {}
    buf = None
    reg = None
    for line in sys.stdin:
        c = json.loads(line)
        cmd = c["cmd"]
        try:
            if cmd == "init":
                # The backend under test; UCX (with UCX_TLS=tcp) is the reference.
                backend = c.get("backend", "ZCNET")
                agent = nixl_agent(c["name"], nixl_agent_config(backends=[]))
                agent.create_backend(backend, c.get("params", {}))
                buf = np.zeros(c["size"], dtype=np.uint8)
                reg = agent.register_memory(
                    [(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM", backends=[backend]
                )
                reply(
                    md=base64.b64encode(agent.get_agent_metadata()).decode(),
                    addr=buf.ctypes.data,
                    plugins=agent.get_plugin_list(),
                )
            elif cmd == "add_remote":
                name = agent.add_remote_agent(base64.b64decode(c["md"]))
                reply(name=name.decode() if isinstance(name, bytes) else name)
            elif cmd == "remove_remote":
                agent.remove_remote_agent(c["name"])
                reply(ok=True)
            elif cmd == "fill":
                buf[c["off"] : c["off"] + c["len"]] = pattern(c["seed"], c["len"])
                reply(ok=True)
            elif cmd == "digest":
                reply(sha=hashlib.sha256(buf[c["off"] : c["off"] + c["len"]].tobytes()).hexdigest())
            elif cmd == "xfer":
                local = agent.get_xfer_descs(
                    [(buf.ctypes.data + o, n, 0) for o, n in c["local"]], "DRAM"
                )
                remote = agent.get_xfer_descs(
                    [(c["remote_addr"] + o, n, 0) for o, n in c["remote"]], "DRAM"
                )
                notif = c.get("notif", "").encode()
                t0 = time.monotonic()
                h = agent.initialize_xfer(
                    c["op"], local, remote, c["peer"], notif, backends=[backend]
                )
                # `repeat`: the same handle posted again once done (NIXL's repost), the buffer
                # refilled with the next seed before each repost when `refill` is given.
                for i in range(c.get("repeat", 1)):
                    if i and "refill" in c:
                        o, n = c["refill"]
                        buf[o : o + n] = pattern(c["seed"] + i, n)
                    state = agent.transfer(h)
                    deadline = time.monotonic() + c.get("timeout", 60)
                    # `spin`: poll without sleeping, as a user after the lowest latency does
                    # (scripts/nixl-bench.py); else a short sleep between polls.
                    nap = 0 if c.get("spin") else 0.0005
                    while state == "PROC" and time.monotonic() < deadline:
                        if nap:
                            time.sleep(nap)
                        state = agent.check_xfer_state(h)
                    if state != "DONE":
                        break
                secs = time.monotonic() - t0
                agent.release_xfer_handle(h)
                reply(state=state, seconds=secs)
            elif cmd == "post":
                # Posts a request and returns at once; "wait" finishes it.
                local = agent.get_xfer_descs(
                    [(buf.ctypes.data + o, n, 0) for o, n in c["local"]], "DRAM"
                )
                remote = agent.get_xfer_descs(
                    [(c["remote_addr"] + o, n, 0) for o, n in c["remote"]], "DRAM"
                )
                h = agent.initialize_xfer(
                    c["op"], local, remote, c["peer"], c.get("notif", "").encode(),
                    backends=[backend],
                )
                posted[id(h)] = h
                reply(id=id(h), state=agent.transfer(h))
            elif cmd == "wait":
                h = posted.pop(c["id"])
                state = agent.check_xfer_state(h)
                deadline = time.monotonic() + c.get("timeout", 60)
                while state == "PROC" and time.monotonic() < deadline:
                    time.sleep(0.001)
                    state = agent.check_xfer_state(h)
                agent.release_xfer_handle(h)
                reply(state=state)
            elif cmd == "post_release":
                # Posts a request and releases it at once, before it can complete.
                local = agent.get_xfer_descs(
                    [(buf.ctypes.data + o, n, 0) for o, n in c["local"]], "DRAM"
                )
                remote = agent.get_xfer_descs(
                    [(c["remote_addr"] + o, n, 0) for o, n in c["remote"]], "DRAM"
                )
                h = agent.initialize_xfer(
                    c["op"], local, remote, c["peer"], c.get("notif", "").encode(),
                    backends=[backend],
                )
                state = agent.transfer(h)
                agent.release_xfer_handle(h)
                reply(state=state)
            elif cmd == "cpu":
                # This process's CPU time so far, all its threads (NIXL's and the backend's).
                t = os.times()
                reply(user=t.user, sys=t.system)
            elif cmd == "send_notif":
                # (1.5.1's send_notif(..., backend=) passes the handle where the binding wants a
                # list: without it, the agent picks the one backend with notifications, ZCNET.)
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
                if reg is not None:
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
                reply(ok=True)
                return
            else:
                reply(error=f"unknown command {cmd}")
        except Exception as e:  # reported to the test, which fails with it
            reply(error=f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
