"""Receiving through zcnet.Receiver: data checked byte for byte via np.from_dlpack, DLPack capsules,
buffers going back to the kernel when dropped, and the error when Python holds them all."""

import gc
import subprocess
import weakref

import numpy as np
import pytest

import zcnet
from conftest import Thread, send_pattern

MiB = 1 << 20


def check_stream(rx, seed=1):
    """Iterates `rx` to the end, checking every buffer against the pattern; returns the bytes."""
    total = 0
    for buf in rx:
        view = np.from_dlpack(buf)
        assert view.dtype == np.uint8 and view.ndim == 1 and view.size == len(buf)
        expect = np.frombuffer(zcnet.pattern(seed, buf.offset, len(buf)), dtype=np.uint8)
        if not np.array_equal(view, expect):
            bad = int(np.flatnonzero(view != expect)[0])
            pytest.fail(
                f"payload mismatch at stream byte {buf.offset + bad}: "
                f"expected {expect[bad]:#04x}, got {view[bad]:#04x}"
            )
        assert buf.offset == total
        total += len(buf)
    return total


def test_256mib_from_zcnet_send_verified_via_dlpack(listener, zcnet_bin):
    """`zcnet send --verify` (the CLI, the pattern's other implementation) to a Python Receiver."""
    size = 256 * MiB
    send = subprocess.Popen(
        [zcnet_bin, "send", listener.addr, "--verify", "--bytes", str(size), "--seed", "7"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        conn = listener.accept()
        rx = zcnet.Receiver(mode="auto")
        rx.add(conn)
        assert check_stream(rx, seed=7) == size
    finally:
        _, err = send.communicate(timeout=60)
    assert send.returncode == 0, err.decode()
    st = rx.stats()
    assert st["bytes"] == size and st["eofs"] == 1 and st["failures"] == 0
    assert st["mode"] in ("uring", "copy")
    assert st["copied_bytes"] + st["zerocopy_bytes"] == size
    # auto says why it did not take zcrx (no interface named).
    assert any(f["tried"] == "zcrx" and f["reason"] for f in st["fallbacks"])


@pytest.mark.parametrize("mode", ["copy", "uring"])
def test_each_mode_from_python_sender(listener, mode):
    size = 24 * MiB + 12345
    peer = Thread(send_pattern, listener, size, 3)
    rx = zcnet.Receiver(mode=mode)
    rx.add(listener.accept())
    assert rx.mode == mode
    assert check_stream(rx, seed=3) == size
    assert peer.result()["bytes"] == size
    assert rx.connections == 0


def test_two_connections_until_both_end(listener):
    peers = [Thread(send_pattern, listener, 3 * MiB, seed) for seed in (11, 12)]
    rx = zcnet.Receiver()
    ids = [rx.add(listener.accept()) for _ in peers]
    got = {i: 0 for i in ids}
    for buf in rx:
        got[buf.conn] += len(buf)
    assert sorted(got.values()) == [3 * MiB, 3 * MiB]
    for p in peers:
        p.result()


def capsule_name(cap):
    return repr(cap).split('"')[1]


def test_dlpack_capsules_and_lifetime(listener):
    peer = Thread(send_pattern, listener, 1 * MiB, 5)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    it = iter(rx)
    buf = next(it)
    assert buf.__dlpack_device__() == (1, 0)  # kDLCPU
    assert capsule_name(buf.__dlpack__()) == "dltensor"
    assert capsule_name(buf.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(buf.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(buf.__dlpack__(max_version=(1, 3), dl_device=(1, 0), copy=False)) == (
        "dltensor_versioned"
    )
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    assert bytes(buf) == zcnet.pattern(5, 0, len(buf))

    # The array keeps the buffer alive; the buffer goes when the last array does.
    view = np.from_dlpack(buf)
    assert not view.flags.writeable  # the versioned capsule's read-only flag
    w = weakref.ref(buf)
    del buf
    gc.collect()
    assert w() is not None
    first = bytes(view[:16])
    del view
    gc.collect()
    assert w() is None
    assert first == zcnet.pattern(5, 0, 16)

    # A capsule nobody consumed gives the buffer back when it is dropped.
    buf = next(it)
    cap = buf.__dlpack__(max_version=(1, 0))
    w = weakref.ref(buf)
    del buf
    assert w() is not None
    del cap
    gc.collect()
    assert w() is None
    for _ in it:
        pass
    peer.result()


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_buffers_return_when_dropped(listener):
    """100,000 receives, each touched through np.from_dlpack and dropped: the receiver never
    runs out of buffers, the held count stays within the pool, and RSS stays flat."""
    n_buffers, buf_size = 64, 1024
    size = 100_000 * buf_size
    peer = Thread(send_pattern, listener, size, 9, 4 * MiB)
    rx = zcnet.Receiver(mode="uring", buffers=n_buffers, buf_size=buf_size)
    rx.add(listener.accept())
    count = total = 0
    held_max = 0
    rss_at_10k = None
    for buf in rx:
        view = np.from_dlpack(buf)
        total += len(buf) if view[0] == view[0] else 0
        count += 1
        if count % 1000 == 0:
            held_max = max(held_max, rx.held)
        if count == 10_000:
            rss_at_10k = rss_bytes()
    peer.result()
    assert total == size
    assert count >= 100_000
    assert held_max <= n_buffers
    st = rx.stats()
    assert st["buffers"] == count
    # Every buffer but those dropped since the last poll came back to the kernel.
    assert st["returned"] + rx.held == count
    assert rss_bytes() - rss_at_10k < 16 * MiB, "RSS grew while receiving"


def test_held_buffers_starve_the_ring_with_an_error(listener):
    """Arrays that keep every buffer alive starve the receiver: StarvedError names how many are
    held, and receiving resumes once they are dropped."""
    size = 16 * MiB
    peer = Thread(send_pattern, listener, size, 4)
    rx = zcnet.Receiver(mode="uring", buffers=16, starve_timeout=0.3)
    rx.add(listener.accept())
    kept = []
    it = iter(rx)
    with pytest.raises(zcnet.StarvedError) as e:
        for buf in it:
            kept.append(np.from_dlpack(buf))  # the array holds the buffer
            del buf
    assert len(kept) == 16
    assert "holds 16 of the receiver's 16 buffers" in str(e.value)
    assert isinstance(e.value, zcnet.Error)
    received = sum(v.size for v in kept)
    del kept
    received += sum(len(b) for b in it)
    assert received == size
    peer.result()


@pytest.mark.parametrize("mode", ["copy"])
def test_held_buffers_starve_copy_mode_too(listener, mode):
    peer = Thread(send_pattern, listener, 8 * MiB, 4)
    rx = zcnet.Receiver(mode=mode, buffers=4, starve_timeout=0.3)
    rx.add(listener.accept())
    it = iter(rx)
    kept = [next(it) for _ in range(4)]
    with pytest.raises(zcnet.StarvedError, match="holds 4 of"):
        next(it)
    del kept
    assert sum(len(b) for b in it) > 0
    peer.result()


def test_recv_into_preallocated(listener):
    size = 5 * MiB + 7
    peer = Thread(send_pattern, listener, size, 2)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    out = np.empty(size + 100, dtype=np.uint8)
    got = 0
    while True:
        n = rx.recv_into(out[got : got + 1_000_003])
        if n == 0:
            break
        got += n
    assert got == size
    assert out[:size].tobytes() == zcnet.pattern(2, 0, size)
    with pytest.raises(ValueError, match="read-only"):
        rx.recv_into(b"immutable")
    peer.result()


def test_zcrx_on_lo_raises_the_kernels_reason():
    with pytest.raises(zcnet.UnsupportedError) as e:
        zcnet.Receiver(mode="zcrx", iface="lo")
    msg = str(e.value)
    assert "zcrx" in msg and "lo" in msg
    assert "not supported" in msg
    assert e.value.errno is not None  # the kernel's errno (EOPNOTSUPP and kin)


def test_bad_mode_is_an_argument_error():
    with pytest.raises(zcnet.ArgumentError, match="nope"):
        zcnet.Receiver(mode="nope")
    with pytest.raises(zcnet.ArgumentError, match="nope"):
        zcnet.Sender(None, mode="nope")


def test_add_refuses_what_is_not_a_connected_tcp_socket():
    import socket

    rx = zcnet.Receiver()
    with pytest.raises(TypeError):
        rx.add(3)
    with pytest.raises(TypeError):
        rx.add(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    with pytest.raises(OSError):
        rx.add(socket.socket())  # not connected


def test_a_receiver_whose_last_buffer_dies_on_another_thread_is_freed(listener):
    """A Buffer keeps its Receiver alive; when the last one dies on another thread, the
    Receiver (which only its own thread may destroy) is handed back to that thread and
    freed at its next call into zcnet, not leaked with a warning."""
    import sys
    import threading
    import weakref

    warnings = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: warnings.append(str(u.exc_value))
    try:
        rx = zcnet.Receiver(mode="copy")
        peer = listener.connect()
        rx.add(listener.accept())
        peer.sendall(b"x" * 1000)
        holder = [next(iter(rx))]
        ref = weakref.ref(rx)
        del rx
        peer.close()
        gc.collect()
        assert ref() is not None, "the buffer keeps its receiver"
        t = threading.Thread(target=holder.clear)
        t.start()
        t.join()
        gc.collect()
        # Any call into zcnet on the receiver's thread frees it.
        zcnet.Receiver(mode="copy")
        gc.collect()
        assert ref() is None, "the receiver was not freed"
        assert not [w for w in warnings if "unsendable" in w], warnings
    finally:
        sys.unraisablehook = old_hook
