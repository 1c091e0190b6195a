"""Buffer.memoryview(): the buffer protocol for consumers without DLPack, read-only and without a
copy, keeping the kernel buffer lent while any view lives; Buffer.tobytes() is a copy."""

import ctypes
import gc
import signal
import weakref

import numpy as np
import pytest

import zcnet
from conftest import Thread, send_pattern

MiB = 1 << 20


@pytest.fixture(autouse=True)
def time_limit():
    """Each test here ends within 60 s (SIGALRM; the Receiver checks signals between waits)."""

    def expired(signum, frame):
        raise TimeoutError("the test ran past its 60 s limit")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_memoryview_is_read_only_and_not_a_copy(listener):
    peer = Thread(send_pattern, listener, 1 * MiB, 3)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    it = iter(rx)
    buf = next(it)
    mv = buf.memoryview()
    assert isinstance(mv, memoryview)
    assert mv.readonly and mv.format == "B" and mv.ndim == 1 and mv.nbytes == len(buf)
    assert mv.c_contiguous
    assert mv.tobytes() == zcnet.pattern(3, buf.offset, len(buf))
    # The same memory as the DLPack export: no copy was made.
    a = np.frombuffer(mv, dtype=np.uint8)
    assert a.ctypes.data == np.from_dlpack(buf).ctypes.data
    assert not a.flags.writeable
    with pytest.raises(TypeError):
        mv[0] = 1
    # The exporter itself refuses writing.
    assert type(mv.obj).__name__ == "BufferExport"
    with pytest.raises((BufferError, TypeError), match="not writable|read-only"):
        (ctypes.c_ubyte * 1).from_buffer(mv.obj)
    assert memoryview(mv.obj).readonly
    # tobytes() is a copy, equal to bytes(buf).
    c = buf.tobytes()
    assert isinstance(c, bytes) and c == bytes(buf) == mv.tobytes()
    del a, mv, buf
    for _ in it:
        pass
    peer.result()


def test_a_view_keeps_the_buffer_lent_until_it_goes(listener):
    peer = Thread(send_pattern, listener, 1 * MiB, 4)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    it = iter(rx)
    buf = next(it)
    mv = buf.memoryview()
    sliced = mv[100:200]  # a view of the view holds it too
    w = weakref.ref(buf)
    del buf, mv
    gc.collect()
    assert w() is not None, "the Buffer went while a view of its bytes was alive"
    assert sliced.tobytes() == zcnet.pattern(4, 100, 100)
    del sliced
    gc.collect()
    assert w() is None, "the Buffer outlived every view of it"
    for _ in it:
        pass
    peer.result()


def test_memoryview_of_a_buffer_directly_is_refused_with_the_alternative(listener):
    """`memoryview(buf)` needs the buffer slots on Buffer's own type, which this abi3 (CPython 3.9)
    build cannot declare: it is a TypeError, and buf.memoryview() is the way."""
    peer = Thread(send_pattern, listener, 64 << 10, 5)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    for buf in rx:
        with pytest.raises(TypeError):
            memoryview(buf)
        assert bytes(buf.memoryview()) == bytes(buf)
    peer.result()
