"""Sending with zcnet.Sender: numpy arrays (the buffer protocol), bytes-like objects, torch
tensors (DLPack), and the refusal of memory that is not one C-contiguous range."""

import numpy as np
import pytest

import zcnet
from conftest import Thread


def drain(listener):
    """Accepts one connection and returns everything it carries (a plain socket reader)."""
    conn = listener.accept()
    chunks = []
    while True:
        b = conn.recv(1 << 20)
        if not b:
            break
        chunks.append(b)
    conn.close()
    return b"".join(chunks)


@pytest.mark.parametrize("mode", ["auto", "copy", "msg-zerocopy", "uring", "uring-zc"])
def test_send_c_contiguous_arrays(listener, mode):
    rng = np.random.default_rng(1)
    arrays = [
        np.arange(1 << 18, dtype=np.uint32),
        rng.standard_normal((300, 257)),  # float64, 2-D
        np.asfortranarray(rng.integers(0, 255, (64, 1), dtype=np.uint8)),  # one column: contiguous
        np.zeros(0, dtype=np.int16),
        np.arange(10, dtype=np.int64)[::1],
    ]
    extra = [b"bytes", bytearray(b"bytearray"), memoryview(b"memoryview")]
    peer = Thread(drain, listener)
    tx = zcnet.Sender(listener.connect(), mode=mode)
    sent = 0
    for a in arrays + extra:
        n = tx.send(a)
        assert n == (a.nbytes if isinstance(a, np.ndarray) else len(a))
        sent += n
    st = tx.finish()
    got = peer.result()
    assert st["bytes"] == sent == len(got)
    assert got == b"".join(bytes(memoryview(a).cast("B")) if isinstance(a, np.ndarray) else bytes(a) for a in arrays + extra)
    assert st["mode"] == mode
    with pytest.raises(zcnet.Error, match="finish"):
        tx.send(b"more")


@pytest.mark.parametrize("mode", ["uring", "uring-zc"])
def test_a_sender_dropped_unfinished_never_ends_the_stream_as_if_complete(listener, mode):
    """8 MiB handed to a sender dropped without finish(): the peer gets every byte, or sees a
    reset; never a clean end after fewer bytes (which it could not tell from a whole stream)."""

    def read_all(ls):
        conn = ls.accept()
        n = 0
        try:
            while True:
                b = conn.recv(1 << 20)
                if not b:
                    return n, "eof"
                n += len(b)
        except ConnectionResetError:
            return n, "reset"
        finally:
            conn.close()

    peer = Thread(read_all, listener)
    tx = zcnet.Sender(listener.connect(), mode=mode)
    assert tx.send(bytes(8 << 20)) == 8 << 20
    del tx
    n, end = peer.result()
    assert end == "reset" or n == 8 << 20, f"{n} B, then a clean end"


def test_a_refused_sender_leaves_the_socket_to_try_again(listener):
    """Sender() that fails (devmem on loopback: no device binds it) leaves the Python socket
    open and as it was, timeout included, so the caller can fall back to another mode on the
    same connection; the one that succeeds closes it and owns the connection."""
    peer = Thread(drain, listener)
    sock = listener.connect()
    sock.settimeout(7.0)
    with pytest.raises(zcnet.UnsupportedError):
        zcnet.Sender(sock, mode="devmem")
    assert sock.fileno() >= 0 and sock.gettimeout() == 7.0
    tx = zcnet.Sender(sock, mode="copy")
    assert sock.fileno() == -1, "the Python object is closed once the sender has the connection"
    tx.send(b"still connected")
    tx.finish()
    assert peer.result() == b"still connected"


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(100, dtype=np.uint64)[::2],
        lambda: np.arange(100, dtype=np.float32).reshape(10, 10).T,
        lambda: np.arange(100, dtype=np.uint8).reshape(10, 10)[:, :5],
        lambda: memoryview(bytes(range(100)))[::3],
    ],
    ids=["strided", "transposed", "sliced-columns", "strided-memoryview"],
)
def test_refuses_non_contiguous_with_a_clear_message(listener, make):
    peer = Thread(drain, listener)
    tx = zcnet.Sender(listener.connect(), mode="copy")
    with pytest.raises(ValueError, match="not C-contiguous.*ascontiguousarray"):
        tx.send(make())
    tx.send(np.ascontiguousarray(make()))
    tx.finish()
    assert len(peer.result()) > 0


def test_refuses_what_has_no_memory(listener):
    peer = Thread(drain, listener)
    tx = zcnet.Sender(listener.connect())
    with pytest.raises(TypeError, match="bytes-like object or a tensor"):
        tx.send(12)
    with pytest.raises(TypeError, match="bytes-like object or a tensor"):
        tx.send("text")
    tx.finish()
    peer.result()


def test_python_sender_to_python_receiver_numpy_roundtrip(listener):
    a = np.random.default_rng(2).integers(0, 1 << 62, 3 << 20, dtype=np.int64)  # 24 MiB

    def send():
        tx = zcnet.Sender(listener.connect(), mode="auto")
        tx.send(a)
        return tx.finish()

    peer = Thread(send)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    out = np.empty_like(a)
    raw = out.view(np.uint8)
    for buf in rx:
        raw[buf.offset : buf.offset + len(buf)] = np.from_dlpack(buf)
    assert np.array_equal(out, a)
    assert peer.result()["bytes"] == a.nbytes


def test_torch_cpu_tensors(listener):
    torch = pytest.importorskip("torch", reason="torch is not installed: the torch CPU test needs it")
    t = torch.arange(1 << 20, dtype=torch.int32)

    def send():
        tx = zcnet.Sender(listener.connect())
        tx.send(t)  # through __dlpack__
        with pytest.raises(ValueError, match="not C-contiguous"):
            tx.send(t[::2])
        return tx.finish()

    peer = Thread(send)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    parts = [torch.from_dlpack(buf).clone() for buf in rx]
    got = torch.cat(parts).view(torch.int32)
    assert torch.equal(got, t)
    assert peer.result()["bytes"] == t.numel() * 4


class DlpackOnly:
    """An object with DLPack and no buffer protocol (as a torch tensor is)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_send_through_dlpack(listener):
    a = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)
    peer = Thread(drain, listener)
    tx = zcnet.Sender(listener.connect())
    assert tx.send(DlpackOnly(a)) == a.nbytes
    with pytest.raises(ValueError, match="not C-contiguous"):
        tx.send(DlpackOnly(a.T))
    assert tx.send(DlpackOnly(a[:, :1].copy())) == 256 * 4
    tx.finish()
    assert peer.result() == a.tobytes() + a[:, :1].tobytes()


def test_forward_received_buffers(listener):
    """A received zcnet.Buffer is itself sendable (through its DLPack capsule): a relay."""
    from conftest import Listener, send_pattern

    size = 6 << 20
    first = Thread(send_pattern, listener, size, 8)
    out = Listener()
    sink = Thread(drain, out)
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    tx = zcnet.Sender(out.connect())
    for buf in rx:
        tx.send(buf)
    assert tx.finish()["bytes"] == size
    first.result()
    assert sink.result() == zcnet.pattern(8, 0, size)
    out.close()
