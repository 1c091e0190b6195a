"""Blocking calls release the GIL and honour Ctrl-C: SIGINT during a receive raises
KeyboardInterrupt within a poll slice."""

import gc
import signal
import threading
import time

import pytest

import zcnet
from conftest import Thread


def test_keyboard_interrupt_during_a_blocking_receive(listener):
    quiet = listener.connect()  # a peer that never sends
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    main = threading.get_ident()
    timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(iter(rx))
    elapsed = time.monotonic() - t0
    timer.join()
    assert 0.25 < elapsed < 2.0
    quiet.close()
    assert list(rx) == []  # the peer's close ends the stream


def test_an_interrupted_recv_into_says_how_many_bytes_it_placed(listener):
    """100 B arrive, then nothing: recv_into of 1000 B waits for the rest, and Ctrl-C raises
    KeyboardInterrupt with `filled` = 100, the bytes already in `out` (the stream's next, never
    handed out again)."""
    peer = listener.connect()
    rx = zcnet.Receiver(mode="copy")
    rx.add(listener.accept())
    peer.sendall(bytes(range(100)))
    out = bytearray(1000)
    timer = interrupt_after(0.3)
    with pytest.raises(KeyboardInterrupt) as e:
        rx.recv_into(out)
    timer.join()
    assert e.value.filled == 100
    assert out[:100] == bytes(range(100))
    peer.sendall(b"next")
    peer.close()
    rest = bytearray(1000)
    assert rx.recv_into(rest) == 4 and rest[:4] == b"next"


def test_gil_is_released_while_receiving(listener):
    """Another Python thread runs while the receiver waits."""
    ticks = []

    def ticker():
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            ticks.append(1)
            time.sleep(0.01)

    quiet = listener.connect()
    rx = zcnet.Receiver()
    rx.add(listener.accept())
    t = Thread(ticker)
    closer = threading.Timer(0.6, quiet.close)
    closer.start()
    assert list(rx) == []
    t.result()
    closer.join()
    assert len(ticks) > 20


def test_keyboard_interrupt_during_a_blocking_send(listener):
    """A copying send to a peer that does not read blocks in send(2); SIGINT ends it."""
    import numpy as np

    tx = zcnet.Sender(listener.connect(), mode="copy")
    idle = listener.accept()  # never reads
    timer = threading.Timer(0.3, signal.pthread_kill, (threading.get_ident(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        tx.send(np.zeros(256 << 20, dtype=np.uint8))
    elapsed = time.monotonic() - t0
    timer.join()
    assert elapsed < 2.0
    idle.close()


def _sender_or_skip(sock, mode, stall_timeout):
    """A Sender of `mode` on `sock`, or the test skipped, naming why, where the mode is refused."""
    try:
        return zcnet.Sender(sock, mode=mode, stall_timeout=stall_timeout)
    except zcnet.Error as e:
        pytest.skip(f"{mode} is refused here: {e}")


def interrupt_after(seconds):
    """SIGINT to this (the main) thread after `seconds`; returns the timer (join it)."""
    t = threading.Timer(seconds, signal.pthread_kill, (threading.get_ident(), signal.SIGINT))
    t.start()
    return t


@pytest.mark.parametrize("mode", ["copy", "msg-zerocopy", "uring", "uring-zc", "auto"])
def test_keyboard_interrupt_while_a_send_waits_for_the_kernel(listener, mode):
    """A peer that stops reading: the send waits for buffers (zero-copy modes: for completions
    and notifications that do not come). SIGINT after 0.5 s raises KeyboardInterrupt promptly, in
    send() and then in finish(), whatever the mode; the library's own SIGINT flag plays no part
    (Python's handler is the one installed)."""
    import numpy as np

    sock = listener.connect()
    idle = listener.accept()  # never reads
    try:
        tx = _sender_or_skip(sock, mode, 30.0)
        timer = interrupt_after(0.5)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            tx.send(np.zeros(256 << 20, dtype=np.uint8))
        elapsed = time.monotonic() - t0
        timer.join()
        assert 0.4 < elapsed < 2.0, f"send took {elapsed:.2f} s to honour SIGINT"
        if tx.stats()["bytes"] > 0 and mode != "copy":
            # What was handed over is still in flight: finish() waits for it, interruptibly.
            timer = interrupt_after(0.5)
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                tx.finish()
            elapsed = time.monotonic() - t0
            timer.join()
            assert 0.4 < elapsed < 2.0, f"finish took {elapsed:.2f} s to honour SIGINT"
        # Dropped after the interrupt, with the peer still not reading: the connection is aborted,
        # so the kernel's buffers come back at once (the library alone would wait for them).
        t0 = time.monotonic()
        del tx
        gc.collect()
        elapsed = time.monotonic() - t0
        assert elapsed < 1.0, f"dropping the interrupted sender took {elapsed:.2f} s"
        if mode not in ("copy", "auto"):  # auto may have switched to copying: nothing held then
            idle.settimeout(5)
            with pytest.raises(ConnectionResetError):
                while idle.recv(1 << 20):
                    pass
    finally:
        idle.close()


@pytest.mark.parametrize("mode", ["copy", "msg-zerocopy", "uring-zc", "auto"])
def test_a_stalled_send_still_raises_after_stall_timeout(listener, mode):
    """The binding's bounded waits keep the library's stall timeout: nothing back for
    `stall_timeout` seconds is zcnet.StalledError, in send() and in finish() (copy: no room in
    the socket for that long, in send())."""
    import numpy as np

    sock = listener.connect()
    idle = listener.accept()  # never reads
    try:
        tx = _sender_or_skip(sock, mode, 0.5)
        t0 = time.monotonic()
        with pytest.raises(zcnet.StalledError, match="is the receiver reading"):
            tx.send(np.zeros(256 << 20, dtype=np.uint8))
        assert 0.4 < time.monotonic() - t0 < 5.0
        if tx.stats()["mode"] == "copy":
            return  # copying holds nothing after a send: finish() has nothing to wait for
        t0 = time.monotonic()
        with pytest.raises(zcnet.StalledError):
            tx.finish()
        assert 0.4 < time.monotonic() - t0 < 5.0
    finally:
        idle.close()


def _data(n):
    """`n` bytes that tell a lost, repeated or reordered stretch from the right one."""
    import numpy as np

    return (np.arange(n // 8, dtype=np.uint64) * 0x9E3779B97F4A7C15).view(np.uint8)


def _read_all(sock, delay=0.0):
    """Everything `sock` receives until its end, after `delay` seconds of not reading."""
    time.sleep(delay)
    sock.settimeout(30)
    got = bytearray()
    while chunk := sock.recv(1 << 20):
        got += chunk
    return bytes(got)


@pytest.mark.parametrize("mode", ["copy", "msg-zerocopy", "uring", "uring-zc", "auto"])
def test_keyboard_interrupt_says_what_of_the_send_went(listener, mode):
    """SIGINT while a send waits on a peer that does not read: KeyboardInterrupt carries `sent`,
    the bytes of that send now in the stream, and the peer then gets exactly those, in order
    (Python's handler runs when the blocked system call returns EINTR)."""
    sock = listener.connect()
    peer = listener.accept()
    try:
        tx = _sender_or_skip(sock, mode, 30.0)
        data = _data(256 << 20)
        timer = interrupt_after(0.5)
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt) as e:
            tx.send(data)
        elapsed = time.monotonic() - t0
        timer.join()
        assert 0.4 < elapsed < 2.0, f"send took {elapsed:.2f} s to honour SIGINT"
        sent = e.value.sent
        assert 0 < sent < len(data), sent
        reader = Thread(_read_all, peer)
        st = tx.finish()
        got = reader.result()
        # io_uring sends handed over before the interrupt complete too: the stream may hold
        # more than `sent` only there, and never anything but the data's next bytes.
        if mode in ("uring", "uring-zc", "auto"):
            assert sent <= len(got) == st["bytes"]
        else:
            assert len(got) == sent == st["bytes"]
        assert got == data[: len(got)].tobytes()
    finally:
        peer.close()


@pytest.mark.parametrize("mode", ["copy", "msg-zerocopy", "uring", "uring-zc", "auto"])
def test_a_signal_whose_handler_returns_does_not_disturb_a_send(listener, mode):
    """Signals with a Python handler that returns (SIGUSR1 every 20 ms, a peer that reads only
    after 0.5 s): each cuts the blocked system call short, the handler runs, the send goes on
    from where it was; the peer gets the data once, in order."""
    sock = listener.connect()
    peer = listener.accept()
    ran = []
    old = signal.signal(signal.SIGUSR1, lambda *_: ran.append(1))
    main = threading.get_ident()
    stop = threading.Event()

    def pester():
        while not stop.wait(0.02):
            signal.pthread_kill(main, signal.SIGUSR1)

    try:
        tx = _sender_or_skip(sock, mode, 30.0)
        data = _data(32 << 20)
        reader = Thread(_read_all, peer, 0.5)
        pest = Thread(pester)
        try:
            assert tx.send(data) == len(data)
            st = tx.finish()
        finally:
            stop.set()
            pest.result()
        got = reader.result()
        assert st["bytes"] == len(got) == len(data)
        assert got == data.tobytes()
        # Signals came while the send ran (the handler runs between the binding's slices, and
        # at once when one cuts a blocked system call short).
        assert len(ran) >= 3, f"the handler ran {len(ran)} times"
    finally:
        signal.signal(signal.SIGUSR1, old)
        peer.close()
