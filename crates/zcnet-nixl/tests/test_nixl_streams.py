"""The ZCNET backend's `streams` parameter: a request of 4 MiB or more is cut across several TCP
connections to the peer (in parts at 64 KiB multiples, descriptors split where a part ends), and
its notification is queued at the target only once every part arrived. Every byte checked."""

import pytest

from test_nixl_transfer import check_same


@pytest.mark.parametrize("streams", [2, 4])
@pytest.mark.parametrize("op", ["WRITE", "READ"])
def test_a_large_request_is_cut_across_streams(agents, streams, op):
    a, b = agents(40 << 20, {"streams": str(streams)})
    # Odd lengths and offsets: parts end inside descriptors, not at their edges.
    descs = [[0, (16 << 20) + 12345], [(17 << 20), 7], [(18 << 20) + 3, (9 << 20) - 3]]
    total = sum(n for _, n in descs)
    assert total >= 4 << 20
    src, dst = (a, b) if op == "WRITE" else (b, a)
    for i, (off, n) in enumerate(descs):
        src.call(cmd="fill", seed=40 + i, off=off, len=n)
        dst.call(cmd="fill", seed=90 + i, off=off, len=n)
    r = a.call(cmd="xfer", op=op, local=descs, remote=descs, remote_addr=b.addr, peer="B",
               notif=f"{op}-striped")
    assert r["state"] == "DONE", r
    for off, n in descs:
        check_same(a, off, b, off, n)
    if op == "WRITE":
        got = b.call(cmd="notifs", want=1)["notifs"]
        assert got == [["A", "WRITE-striped"]], got


def test_notifications_stay_in_order_between_striped_and_small_requests(agents):
    """A striped request's notification waits for all its parts; small requests go whole on
    the first stream. Posted one after the other, their notifications arrive in order."""
    a, b = agents(24 << 20, {"streams": "3"})
    a.call(cmd="fill", seed=5, off=0, len=24 << 20)
    order = []
    for i, n in enumerate([8 << 20, 4096, 16 << 20, 1]):
        r = a.call(cmd="xfer", op="WRITE", local=[[0, n]], remote=[[0, n]], remote_addr=b.addr,
                   peer="B", notif=f"n{i}")
        assert r["state"] == "DONE", r
        check_same(a, 0, b, 0, n)
        order.append(f"n{i}")
    got = b.call(cmd="notifs", want=len(order))["notifs"]
    assert got == [["A", m] for m in order], got


def test_each_stream_is_a_connection_of_its_own(plugin_dir, tmp_path):
    """ZCNET_NIXL_STATS counts the connections each engine sent on: with streams=3, A's three
    writers and B's three servers, and every byte of the 12 MiB request sent by A."""
    import json

    from nixl_procs import Worker

    env = {"ZCNET_NIXL_STATS": str(tmp_path / "stats-{pid}.json")}
    a = Worker(plugin_dir, "A", 12 << 20, {"streams": "3"}, env=env)
    b = Worker(plugin_dir, "B", 12 << 20, {"streams": "3"}, env=env)
    try:
        a.call(cmd="add_remote", md=b.md)
        a.call(cmd="fill", seed=3, off=0, len=12 << 20)
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 12 << 20]], remote=[[0, 12 << 20]],
                   remote_addr=b.addr, peer="B")
        assert r["state"] == "DONE", r
        check_same(a, 0, b, 0, 12 << 20)
    finally:
        a.close()
        b.close()
    sa = json.loads((tmp_path / f"stats-{a.proc.pid}.json").read_text())
    sb = json.loads((tmp_path / f"stats-{b.proc.pid}.json").read_text())
    assert sa["connections"] == 3 and sb["connections"] == 3, (sa, sb)
    assert sa["bytes_sent"] >= 12 << 20, sa
    assert sa["zerocopy_bytes"] + sa["copied_bytes"] == sa["bytes_sent"], sa
