"""Helpers of the zcnet Python tests: loopback connections, a pattern sender, the zcnet binary."""

import os
import pathlib
import shutil
import signal
import socket
import threading

import pytest

import zcnet

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def ctrl_c_raises_keyboard_interrupt():
    """SIGINT raises KeyboardInterrupt during every test, as in an interactive Python. A process
    started with SIGINT ignored (a command put in the background by a shell without job
    control) inherits that, and Python then installs no handler of its own: a test that
    interrupts itself would wait for good."""
    old = signal.getsignal(signal.SIGINT)
    if old is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if old is not signal.default_int_handler and old is not None:
        signal.signal(signal.SIGINT, old)


def zcnet_binary():
    """The `zcnet` command: $ZCNET_BIN, else the workspace's build (release, then debug), else PATH."""
    env = os.environ.get("ZCNET_BIN")
    if env:
        return env
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "zcnet"
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which("zcnet")


@pytest.fixture
def zcnet_bin():
    b = zcnet_binary()
    if b is None:
        pytest.skip("the zcnet command is not built: run `cargo build -p zcnet-cli` or set ZCNET_BIN")
    return b


class Listener:
    """A TCP listener on 127.0.0.1 (an ephemeral port)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(30)
        self.port = self.sock.getsockname()[1]
        self.addr = f"127.0.0.1:{self.port}"

    def accept(self):
        conn, _ = self.sock.accept()
        conn.settimeout(None)
        return conn

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.port))

    def close(self):
        self.sock.close()


@pytest.fixture
def listener():
    ls = Listener()
    yield ls
    ls.close()


class Thread(threading.Thread):
    """A thread whose exception (or result) the test collects with `result()`."""

    def __init__(self, fn, *args):
        super().__init__(daemon=True)
        self.fn, self.args, self.exc, self.value = fn, args, None, None
        self.start()

    def run(self):
        try:
            self.value = self.fn(*self.args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.exc = e

    def result(self, timeout=60):
        self.join(timeout)
        assert not self.is_alive(), "the peer thread did not finish"
        if self.exc is not None:
            raise self.exc
        return self.value


def send_pattern(listener, nbytes, seed=1, chunk=1 << 20, mode="auto", **kw):
    """Connects to `listener` and sends `nbytes` of zcnet's pattern with a Python Sender, in chunks
    of `chunk` bytes; returns the sender's statistics."""
    import numpy as np

    s = listener.connect()
    tx = zcnet.Sender(s, mode=mode, **kw)
    off = 0
    while off < nbytes:
        n = min(chunk, nbytes - off)
        tx.send(np.frombuffer(zcnet.pattern(seed, off, n), dtype=np.uint8))
        off += n
    return tx.finish()
