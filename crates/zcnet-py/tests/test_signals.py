"""Blocking calls release the GIL and honour Ctrl-C: SIGINT during a receive raises
KeyboardInterrupt within a poll slice."""

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
