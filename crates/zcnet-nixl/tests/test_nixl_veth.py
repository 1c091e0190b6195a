"""The main transfer cases on a second path: two agents in two network namespaces joined by a veth
pair (scripts/lib/netns_pair.py, made for this module and deleted on every exit path; root
only). ZCNET listens on and publishes each side's address (`ip_addr`), UCX is told the device
(UCX_NET_DEVICES); WRITE and READ of 1 B to 16 MiB, 64 descriptors per request both ways,
notifications in order with a standalone one, every byte checked; every TCP socket of both
agents on the veth addresses."""

import os
import shutil
import signal
import sys

import pytest

from conftest import REPO, Worker
from test_nixl_transfer import BACKENDS, SIZES, check_same

sys.path.insert(0, str(REPO / "scripts" / "lib"))
from netns_pair import ADDR_A, ADDR_B, NetnsPair  # noqa: E402  (scripts/lib)

BUF = (16 << 20) + (1 << 20)


@pytest.fixture(scope="module")
def veth():
    """Two namespaces (this process's id in their names) joined by a veth pair, deleted when the
    module's tests end, fail, or the run is interrupted (SIGTERM is turned into the
    KeyboardInterrupt pytest tears fixtures down for)."""
    if os.geteuid() != 0:
        pytest.skip("the veth leg needs root: it makes two network namespaces joined by a veth pair")
    if shutil.which("ip") is None:
        pytest.skip("the veth leg needs iproute2's `ip` to make its namespaces")

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, interrupted)
    pair = NetnsPair(f"znt{os.getpid()}")
    try:
        pair.setup()  # deletes what it made when it fails
        yield pair
    finally:
        pair.teardown()
        signal.signal(signal.SIGTERM, old)


def veth_agent(plugin_dir, veth, side, backend, made):
    prefix, addr, dev = {
        "A": (veth.exec_a, ADDR_A, veth.dev_a),
        "B": (veth.exec_b, ADDR_B, veth.dev_b),
    }[side]
    if backend == "UCX":
        env, params = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": dev}, None
    else:
        env, params = None, {"ip_addr": addr}
    w = Worker(plugin_dir, side, BUF, params, backend=backend, env=env, prefix=prefix)
    made.append(w)
    return w, addr


@pytest.mark.parametrize("backend", BACKENDS)
def test_veth_write_read_descriptors_and_notifications(plugin_dir, veth, backend):
    made = []
    try:
        a, a_ip = veth_agent(plugin_dir, veth, "A", backend, made)
        b, b_ip = veth_agent(plugin_dir, veth, "B", backend, made)
        assert a.call(cmd="add_remote", md=b.md)["name"] == "B"
        assert b.call(cmd="add_remote", md=a.md)["name"] == "A"
        sent = []
        for size in SIZES:
            a.call(cmd="fill", seed=size, off=0, len=size)
            r = a.call(cmd="xfer", op="WRITE", local=[[0, size]], remote=[[12345, size]],
                       remote_addr=b.addr, peer="B", notif=f"wrote {size}")
            assert r["state"] == "DONE", (size, r)
            check_same(a, 0, b, 12345, size)
            b.call(cmd="fill", seed=size + 7, off=777, len=size)
            r = a.call(cmd="xfer", op="READ", local=[[99, size]], remote=[[777, size]],
                       remote_addr=b.addr, peer="B", notif=f"read {size}")
            assert r["state"] == "DONE", (size, r)
            check_same(a, 99, b, 777, size)
            sent += [f"wrote {size}", f"read {size}"]
        n, step = 64, 4099
        descs = [[i * step, step - 3] for i in range(n)]
        a.call(cmd="fill", seed=1, off=0, len=n * step)
        r = a.call(cmd="xfer", op="WRITE", local=descs, remote=descs, remote_addr=b.addr,
                   peer="B", notif="many")
        assert r["state"] == "DONE", r
        back = [[BUF // 2 + o, ln] for o, ln in descs]
        b.call(cmd="fill", seed=2, off=BUF // 2, len=n * step)
        r = b.call(cmd="xfer", op="WRITE", local=back, remote=back, remote_addr=a.addr,
                   peer="A", notif="back")
        assert r["state"] == "DONE", r
        a.call(cmd="send_notif", peer="B", msg="alone")
        for o, ln in descs:
            check_same(a, o, b, o, ln)
            check_same(a, BUF // 2 + o, b, BUF // 2 + o, ln)
        want = [["A", m] for m in sent + ["many", "alone"]]
        assert b.call(cmd="notifs", want=len(want))["notifs"] == want
        assert a.call(cmd="notifs", want=1)["notifs"] == [["B", "back"]]
        # Nothing went over loopback or any other interface: only the veth's two addresses.
        for w, ip in ((a, a_ip), (b, b_ip)):
            socks = w.call(cmd="sockets")["sockets"]
            assert socks, f"agent {w.name} has no TCP socket"
            for local, remote, state in socks:
                assert local.startswith(ip + ":"), (w.name, local, remote, state)
                if state != "LISTEN":
                    assert remote.split(":")[0] in (ADDR_A, ADDR_B), (w.name, local, remote)
    finally:
        for w in made:
            w.close()
