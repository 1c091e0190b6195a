"""Two agents of the stock NIXL wheel, in two processes, move bytes through the ZCNET backend over
TCP on 127.0.0.1: WRITE and READ of 1 B to 16 MiB, several descriptors per request, with their
notifications, every byte checked (SHA-256 of both sides' buffers)."""

import json
import socket

import pytest

from conftest import Worker

SIZES = [1, 4096, 1 << 20, 16 << 20]
# Each agent's registered buffer: room for the largest transfer at an odd offset.
BUF = (16 << 20) + (1 << 20)


def check_same(a, a_off, b, b_off, n):
    da = a.call(cmd="digest", off=a_off, len=n)["sha"]
    db = b.call(cmd="digest", off=b_off, len=n)["sha"]
    assert da == db, f"{n} bytes differ after the transfer"


# The same cases against NIXL's UCX backend (UCX_TLS=tcp), the reference: what the tests expect
# is NIXL's behaviour, not only ZCNET's.
BACKENDS = ["ZCNET", "UCX"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", SIZES)
def test_write(agents, size, backend):
    a, b = agents(BUF, backend=backend)
    a.call(cmd="fill", seed=size, off=0, len=size)
    b.call(cmd="fill", seed=size + 1, off=0, len=BUF)  # not what A writes
    off = 12345  # an unaligned place in B's buffer
    r = a.call(
        cmd="xfer", op="WRITE", local=[[0, size]], remote=[[off, size]],
        remote_addr=b.addr, peer="B", notif=f"wrote {size}",
    )
    assert r["state"] == "DONE", r
    check_same(a, 0, b, off, size)
    assert b.call(cmd="notifs", want=1)["notifs"] == [["A", f"wrote {size}"]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", SIZES)
def test_read(agents, size, backend):
    a, b = agents(BUF, backend=backend)
    b.call(cmd="fill", seed=size + 7, off=777, len=size)
    r = a.call(
        cmd="xfer", op="READ", local=[[99, size]], remote=[[777, size]],
        remote_addr=b.addr, peer="B", notif=f"read {size}",
    )
    assert r["state"] == "DONE", r
    check_same(a, 99, b, 777, size)
    assert b.call(cmd="notifs", want=1)["notifs"] == [["A", f"read {size}"]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_descriptors_both_ways_and_in_order(agents, backend):
    """64 descriptors per request, WRITE from A and from B at once in the other direction,
    notifications in the order of the transfers they belong to, standalone ones after."""
    a, b = agents(BUF, backend=backend)
    n, step = 64, 4099
    a.call(cmd="fill", seed=1, off=0, len=n * step)
    b.call(cmd="fill", seed=2, off=BUF // 2, len=n * step)
    descs = [[i * step, step - 3] for i in range(n)]
    for i in range(3):
        r = a.call(cmd="xfer", op="WRITE", local=descs, remote=descs, remote_addr=b.addr,
                   peer="B", notif=f"a{i}")
        assert r["state"] == "DONE", r
    back = [[BUF // 2 + o, ln] for o, ln in descs]
    r = b.call(cmd="xfer", op="WRITE", local=back, remote=back, remote_addr=a.addr, peer="A",
               notif="b0")
    assert r["state"] == "DONE", r
    a.call(cmd="send_notif", peer="B", msg="alone")
    for o, ln in descs:
        check_same(a, o, b, o, ln)
        check_same(a, BUF // 2 + o, b, BUF // 2 + o, ln)
    got = b.call(cmd="notifs", want=4)["notifs"]
    assert got == [["A", "a0"], ["A", "a1"], ["A", "a2"], ["A", "alone"]]
    assert a.call(cmd="notifs", want=1)["notifs"] == [["B", "b0"]]


def test_out_of_range_remote_is_refused_and_the_agent_keeps_working(agents):
    """A remote descriptor beyond the peer's registration is an error status, not a crash; the
    next transfer on the same agents works."""
    a, b = agents(1 << 20)
    with pytest.raises(AssertionError, match="NIXL_ERR|nixl|Error|error"):
        a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[(1 << 20) - 100, 4096]],
               remote_addr=b.addr, peer="B")
    a.call(cmd="fill", seed=9, off=0, len=4096)
    r = a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]],
               remote_addr=b.addr, peer="B")
    assert r["state"] == "DONE", r
    check_same(a, 0, b, 0, 4096)


def test_peer_killed_is_an_error_and_the_agent_keeps_working(plugin_dir, agents):
    """The target's process is killed: the next transfer to it ends in an error (no hang), and
    the initiator goes on with another agent."""
    a, b = agents(1 << 20)
    a.call(cmd="fill", seed=3, off=0, len=1 << 20)
    assert a.call(cmd="xfer", op="WRITE", local=[[0, 1 << 20]], remote=[[0, 1 << 20]],
                  remote_addr=b.addr, peer="B")["state"] == "DONE"
    b.proc.kill()
    b.proc.wait()
    try:
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 1 << 20]], remote=[[0, 1 << 20]],
                   remote_addr=b.addr, peer="B", timeout=30)
        assert r["state"] == "ERR", r
    except AssertionError as e:
        assert "NIXL_ERR" in str(e), e  # refused at post (the connection is known dead)
    c = Worker(plugin_dir, "C", 1 << 20)
    try:
        assert a.call(cmd="add_remote", md=c.md)["name"] == "C"
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 1 << 20]], remote=[[0, 1 << 20]],
                   remote_addr=c.addr, peer="C", notif="after")
        assert r["state"] == "DONE", r
        check_same(a, 0, c, 0, 1 << 20)
        assert c.call(cmd="notifs", want=1)["notifs"] == [["A", "after"]]
    finally:
        c.close()


def test_stale_connection_info_is_refused(plugin_dir):
    """B restarts on the same port: A, still holding the old B's metadata, is refused (the
    engine instance in the connection info differs) instead of writing into the new process's
    memory at the old addresses; with the new metadata loaded, the transfer works."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
    s.close()
    params = {"ip_addr": "127.0.0.1", "port": port}
    a = Worker(plugin_dir, "A", 1 << 20)
    b = Worker(plugin_dir, "B", 1 << 20, params)
    b2 = None
    try:
        a.call(cmd="add_remote", md=b.md)
        a.call(cmd="fill", seed=5, off=0, len=4096)
        assert a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]],
                      remote_addr=b.addr, peer="B")["state"] == "DONE"
        old_addr = b.addr
        b.close()
        b2 = Worker(plugin_dir, "B", 1 << 20, params)
        try:
            r = a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]],
                       remote_addr=old_addr, peer="B", timeout=30)
            assert r["state"] == "ERR", r
        except AssertionError as e:
            assert "NIXL_ERR" in str(e), e
        a.call(cmd="remove_remote", name="B")
        a.call(cmd="add_remote", md=b2.md)
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]],
                   remote_addr=b2.addr, peer="B")
        assert r["state"] == "DONE", r
        check_same(a, 0, b2, 0, 4096)
    finally:
        for w in (a, b, b2):
            if w is not None:
                w.close()


def test_stats_file_counts_what_zcnet_sent(plugin_dir, tmp_path):
    """ZCNET_NIXL_STATS: each process writes its engine's sender counters when the engine is
    destroyed; every byte sent is counted as zero-copy or copied by the kernel's verdict."""
    env = {"ZCNET_NIXL_STATS": str(tmp_path / "stats-{pid}.json")}
    a = Worker(plugin_dir, "A", 1 << 20, env=env)
    b = Worker(plugin_dir, "B", 1 << 20, env=env)
    try:
        a.call(cmd="add_remote", md=b.md)
        a.call(cmd="fill", seed=11, off=0, len=1 << 20)
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 1 << 20]], remote=[[0, 1 << 20]],
                   remote_addr=b.addr, peer="B")
        assert r["state"] == "DONE", r
    finally:
        a.close()
        b.close()
    stats = {}
    for name, w in (("A", a), ("B", b)):
        f = tmp_path / f"stats-{w.proc.pid}.json"
        assert f.is_file(), f"agent {name} wrote no {f.name}"
        stats[name] = json.loads(f.read_text())
    sa = stats["A"]
    assert sa["connections"] == 1 and sa["bytes_sent"] > 1 << 20, sa
    assert sa["zerocopy_bytes"] + sa["copied_bytes"] == sa["bytes_sent"], sa
    # B only acknowledged: a few headers.
    assert 0 < stats["B"]["bytes_sent"] < 4096, stats["B"]


@pytest.mark.parametrize("tx", ["copy", "uring", "uring-zc"])
def test_send_modes(agents, tx):
    """Each of zcnet's send modes (backend parameter `tx`) carries WRITE and READ, both sides
    sending with it; bytes checked."""
    a, b = agents(4 << 20, {"tx": tx})
    a.call(cmd="fill", seed=21, off=0, len=3 << 20)
    b.call(cmd="fill", seed=22, off=3 << 20, len=1 << 20)
    descs = [[0, 1 << 20], [1 << 20, 5], [(1 << 20) + 64, (2 << 20) - 64]]
    r = a.call(cmd="xfer", op="WRITE", local=descs, remote=descs, remote_addr=b.addr, peer="B",
               notif=tx)
    assert r["state"] == "DONE", r
    for o, n in descs:
        check_same(a, o, b, o, n)
    r = a.call(cmd="xfer", op="READ", local=[[3 << 20, 1 << 20]], remote=[[3 << 20, 1 << 20]],
               remote_addr=b.addr, peer="B")
    assert r["state"] == "DONE", r
    check_same(a, 3 << 20, b, 3 << 20, 1 << 20)
    assert b.call(cmd="notifs", want=1)["notifs"] == [["A", tx]]


@pytest.mark.parametrize("op", ["WRITE", "READ"])
def test_released_before_completion(agents, op):
    """A 16 MiB request released right after it was posted: the release returns (the plugin
    stops touching the memory), and the next transfer between the same agents works, bytes and
    notification included."""
    a, b = agents(BUF)
    n = 16 << 20
    for _ in range(3):
        r = a.call(cmd="post_release", op=op, local=[[0, n]], remote=[[0, n]],
                   remote_addr=b.addr, peer="B", notif="released")
        assert r["state"] in ("PROC", "DONE"), r
    a.call(cmd="fill", seed=31, off=n, len=4096)
    r = a.call(cmd="xfer", op="WRITE", local=[[n, 4096]], remote=[[n, 4096]],
               remote_addr=b.addr, peer="B", notif="after")
    assert r["state"] == "DONE", r
    check_same(a, n, b, n, 4096)
    # A released request's notification may or may not have been delivered; "after" comes last.
    got = []
    for _ in range(5):
        got += b.call(cmd="notifs", want=1, timeout=5)["notifs"]
        if ["A", "after"] in got:
            break
    assert got and got[-1] == ["A", "after"], got
    assert all(m == ["A", "released"] for m in got[:-1]), got


LEAK_CHECK = """
import ctypes, gc, os, sys, time
from nixl_cu12 import nixl_agent, nixl_agent_config

def count():
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))

def one_round(i, size=1 << 20):
    agents, bufs = [], []
    for name in (f"a{i}", f"b{i}"):
        ag = nixl_agent(name, nixl_agent_config(backends=[]))
        ag.create_backend("ZCNET", {})
        buf = ctypes.create_string_buffer(size)
        reg = ag.register_memory([(ctypes.addressof(buf), size, 0, "")], "DRAM")
        agents.append((ag, reg))
        bufs.append(buf)
    (a, ra), (b, rb) = agents
    a.add_remote_agent(b.get_agent_metadata())
    for op in ("WRITE", "READ"):
        local = a.get_xfer_descs([(ctypes.addressof(bufs[0]), size, 0)], "DRAM")
        remote = a.get_xfer_descs([(ctypes.addressof(bufs[1]), size, 0)], "DRAM")
        h = a.initialize_xfer(op, local, remote, f"b{i}", b"n")
        state = a.transfer(h)
        while state == "PROC":
            time.sleep(0.001)
            state = a.check_xfer_state(h)
        assert state == "DONE", state
        a.release_xfer_handle(h)
    a.deregister_memory(ra)
    b.deregister_memory(rb)
    del a, b, agents
    gc.collect()

one_round(0)
before = count()
for i in range(1, 4):
    one_round(i)
print("COUNTS", before, count())
"""


def test_engines_leave_no_fds_or_threads(plugin_dir):
    """Agents with ZCNET made, used (WRITE and READ) and destroyed three times in one process:
    the process ends with the fds and threads it had after the first round."""
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", LEAK_CHECK], capture_output=True, text=True,
                       env=dict(os.environ, NIXL_PLUGIN_DIR=str(plugin_dir)), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("COUNTS")]
    assert line, r.stdout + r.stderr
    before, after = line[0][len("COUNTS "):].split(") (")
    assert before + ")" == "(" + after, f"fds, threads: {line[0]}"


def test_repost_the_same_request(agents):
    """One request handle posted three times (NIXL's repost), the source refilled in between:
    the target ends with the last contents and gets one notification per post."""
    a, b = agents(1 << 20)
    n = 300000
    a.call(cmd="fill", seed=40, off=0, len=n)
    r = a.call(cmd="xfer", op="WRITE", local=[[0, n]], remote=[[0, n]], remote_addr=b.addr,
               peer="B", notif="again", repeat=3, refill=[0, n], seed=40)
    assert r["state"] == "DONE", r
    check_same(a, 0, b, 0, n)
    assert b.call(cmd="notifs", want=3)["notifs"] == [["A", "again"]] * 3


def test_peer_killed_mid_transfer(plugin_dir, agents):
    """The target stops (SIGSTOP) with a 16 MiB WRITE in flight, then is killed: the request
    ends in an error, not a hang, and the initiator works with another agent."""
    import signal
    import time

    a, b = agents(BUF)
    # Connected first (connections are made at the first request), then B stops reading.
    assert a.call(cmd="xfer", op="WRITE", local=[[0, 1]], remote=[[0, 1]], remote_addr=b.addr,
                  peer="B")["state"] == "DONE"
    b.proc.send_signal(signal.SIGSTOP)
    try:
        r = a.call(cmd="post", op="WRITE", local=[[0, 16 << 20]], remote=[[0, 16 << 20]],
                   remote_addr=b.addr, peer="B", notif="never")
        assert r["state"] == "PROC", r
        time.sleep(0.3)
        assert a.call(cmd="digest", off=0, len=1)  # A still answers while its WRITE waits
    finally:
        b.proc.kill()
        b.proc.wait()
    try:
        assert a.call(cmd="wait", id=r["id"], timeout=30)["state"] == "ERR"
    except AssertionError as e:
        assert "NIXL_ERR" in str(e), e
    c = Worker(plugin_dir, "C", 1 << 20)
    try:
        a.call(cmd="add_remote", md=c.md)
        a.call(cmd="fill", seed=50, off=0, len=1 << 20)
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 1 << 20]], remote=[[0, 1 << 20]],
                   remote_addr=c.addr, peer="C")
        assert r["state"] == "DONE", r
        check_same(a, 0, c, 0, 1 << 20)
    finally:
        c.close()
