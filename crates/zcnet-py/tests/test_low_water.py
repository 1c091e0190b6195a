"""The Receiver's defaults for bulk streams: 64 KiB buffers and the automatic receive low-water
mark, which must never hold a short message back (request/response stays prompt)."""

import signal
import threading
import time

import pytest

import zcnet
from conftest import Thread

MiB = 1 << 20


@pytest.fixture(autouse=True)
def time_limit():
    """Each test here ends within 60 s: SIGALRM raises in the main thread, and the Receiver
    checks signals between its waits."""

    def expired(signum, frame):
        raise TimeoutError("the test ran past its 60 s limit")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def send_and_close(sock, data):
    try:
        sock.sendall(data)
    finally:
        sock.close()


def test_defaults_are_64k_buffers_and_the_automatic_mark(listener):
    peer = listener.connect()
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    t = Thread(send_and_close, peer, b"x" * (1 << 20))
    sizes = []
    for buf in rx:
        sizes.append(len(buf))
    t.result(timeout=30)
    assert sum(sizes) == 1 << 20
    assert max(sizes) == 64 << 10
    st = rx.stats()
    assert st["low_water"] == "auto"


@pytest.mark.parametrize("mode", ["copy", "uring"])
def test_a_short_message_after_a_bulk_one_is_not_held_by_the_mark(listener, mode):
    """The peer sends 8 MiB (whole buffers: the mark goes up), then 10 bytes, and waits for the
    receiver to have everything before it closes: the last bytes (below the mark) must come
    within the idle delay, not at the close."""
    bulk, tail = 8 * MiB, b"0123456789"
    got_all = threading.Event()

    def peer():
        s = listener.connect()
        try:
            s.sendall(b"b" * bulk)
            time.sleep(0.05)  # the bulk is taken and the mark raised before the tail
            s.sendall(tail)
            # A request/response peer waits here for its answer; 5 s means the tail was held.
            return got_all.wait(5.0)
        finally:
            s.close()

    t = Thread(peer)
    rx = zcnet.Receiver(mode)
    rx.add(listener.accept())
    total = 0
    t_tail = None
    for buf in rx:
        total += len(buf)
        if total == bulk + len(tail):
            t_tail = time.monotonic()
            got_all.set()
    assert t.result(timeout=30), "the last 10 bytes came only with the close: the receive mark held them"
    assert total == bulk + len(tail) and t_tail is not None
    st = rx.stats()
    assert st["low_water"] == "auto"
    assert st["low_water_raises"] >= 1, st  # the bulk part did raise it (the test is not vacuous)
    assert st["low_water_lowers"] >= 1, st


def test_low_water_0_sets_no_mark(listener):
    peer = listener.connect()
    rx = zcnet.Receiver(low_water=0)
    rx.add(listener.accept())
    t = Thread(send_and_close, peer, b"y" * (4 * MiB))
    assert sum(len(b) for b in rx) == 4 * MiB
    t.result(timeout=30)
    st = rx.stats()
    assert st["low_water"] is None
    assert st["low_water_raises"] == 0


def test_a_fixed_low_water_is_the_library_mark(listener):
    """`low_water=N` sets N on each connection for good: the policy stays out of it."""
    peer = listener.connect()
    rx = zcnet.Receiver("copy", low_water=256 << 10)
    rx.add(listener.accept())
    t = Thread(send_and_close, peer, b"z" * (2 * MiB))
    assert sum(len(b) for b in rx) == 2 * MiB
    t.result(timeout=30)
    st = rx.stats()
    assert st["low_water"] == 256 << 10
    assert st["low_water_raises"] == 0
