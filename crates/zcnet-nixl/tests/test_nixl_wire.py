"""The initiator's side of ZCNET's wire: a target that sends its frames in pieces, payloads
around the receive mark, and remote metadata whose connection info is wrong.

The initiator's receiving side is shared by its reader thread and the thread that checks a
request (checkXfer handles what already arrived, without blocking): a frame may be split
anywhere, and whichever thread reads a piece, the request must end with its bytes in place.
Here a stand-in target speaking ZCNET's wire protocol (src/transport/wire.rs) answers on the
port of a real target agent it replaced (killed, its metadata kept by the initiator), cutting
its replies at awkward places (inside a header, between a header and its payload, inside a
payload) with pauses between the pieces, while the initiator polls without sleeping."""

import base64
import hashlib
import os
import re
import socket
import struct
import threading
import time

import pytest

from test_nixl_transfer import check_same, refused

MAGIC = 0x5A434E58
HELLO, HELLO_OK, WRITE, READ_REQ, READ_DATA, END, ACK = 1, 2, 3, 4, 5, 6, 7
HDR = struct.Struct("<IIQQQQQ")


def hdr(kind, post=0, a=0, b=0, c=0, d=0):
    return HDR.pack(MAGIC, kind, post, a, b, c, d)


def read_exact(s, n):
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


class PieceTarget:
    """Accepts the initiator's connection on `port` and serves it: WRITE payloads are kept by
    post id, READ_REQs answered with random bytes (kept too), and each request's replies and
    ACK sent cut at the offsets of `cuts`, `pause` seconds apart."""

    def __init__(self, port, cuts, pause=0.003):
        self.cuts, self.pause = cuts, pause
        self.written, self.read = {}, {}
        self.error = None
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", port))
        self.lsock.listen(4)
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def send_in_pieces(self, s, data):
        at = 0
        for cut in self.cuts + [len(data)]:
            cut = min(cut, len(data))
            if cut > at:
                s.sendall(data[at:cut])
                at = cut
                time.sleep(self.pause)

    def run(self):
        try:
            s, _ = self.lsock.accept()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _, kind, _, _, name_len, instance, _ = HDR.unpack(read_exact(s, HDR.size))
            assert kind == HELLO, kind
            read_exact(s, name_len)
            s.sendall(hdr(HELLO_OK, a=instance))
            replies = bytearray()
            while True:
                try:
                    magic, kind, post, a, b, c, d = HDR.unpack(read_exact(s, HDR.size))
                except EOFError:
                    return
                assert magic == MAGIC
                if kind == WRITE:
                    self.written.setdefault(post, []).append(read_exact(s, b))
                elif kind == READ_REQ:
                    data = os.urandom(b)
                    self.read.setdefault(post, []).append(data)
                    replies += hdr(READ_DATA, post, b=b, d=d) + data
                elif kind == END:
                    read_exact(s, b)
                    replies += hdr(ACK, post)
                    self.send_in_pieces(s, bytes(replies))
                    replies.clear()
                else:
                    raise AssertionError(f"frame kind {kind}")
        except Exception as e:  # reported by the test
            self.error = e

    def close(self):
        self.lsock.close()


def target_port(md_b64):
    """The port in ZCNET's connection info ("zcnet1 IP:PORT INSTANCE") within NIXL's metadata."""
    m = re.search(rb"zcnet1 127\.0\.0\.1:(\d+) [0-9a-f]+", base64.b64decode(md_b64))
    assert m, "no ZCNET connection info in the target's metadata"
    return int(m.group(1))


def test_frames_cut_anywhere_arrive_whole(agents):
    size = 1 << 20
    a, b = agents(size)
    port = target_port(b.md)
    b.proc.kill()
    b.proc.wait()
    # Cut inside the first header, right after it, inside the payload, at the next header's
    # second byte, and so on: both the checking thread and the reader thread see pieces.
    cuts = [1, 47, 48, 49, 600, 4143, 4145, 4200, 8000, 300_000]
    t = PieceTarget(port, cuts)
    try:
        a.call(cmd="fill", seed=5, off=0, len=size)
        cases = [
            ("WRITE", [[0, 4096]]),
            ("READ", [[8192, 4096]]),
            ("READ", [[16384, 100], [20000, 4000], [30000, 1]]),
            ("READ", [[65536, 300_000]]),  # larger than the receive buffer: read in place
        ]
        for post, (op, descs) in enumerate(cases, start=1):
            r = a.call(cmd="xfer", op=op, local=descs, remote=descs, remote_addr=b.addr,
                       peer="B", spin=True, timeout=30)
            assert r["state"] == "DONE", (op, descs, r, t.error)
            if op == "WRITE":
                sent = [a.call(cmd="digest", off=o, len=n)["sha"] for o, n in descs]
                got = [hashlib.sha256(p).hexdigest() for p in t.written[post]]
            else:
                got = [a.call(cmd="digest", off=o, len=n)["sha"] for o, n in descs]
                sent = [hashlib.sha256(p).hexdigest() for p in t.read[post]]
            assert got == sent, (op, descs)
        assert t.error is None, t.error
    finally:
        t.close()


def test_payloads_around_the_receive_mark(agents):
    """Payloads of a few times the receive mark (src/transport/wire.rs: MARK, 256 KiB), which a
    reader reads straight into registered memory with SO_RCVLOWAT raised: a mark above what is
    still to come would leave the reader asleep with the payload's last bytes queued (a hang
    this test's timeout catches). WRITE and READ, each size 6 times, every byte compared."""
    mark = 256 << 10
    sizes = [2 * mark - 1, 2 * mark, 2 * mark + 1, 3 * mark - 4097, 3 * mark + 5, 5 * mark + 3]
    size = 2 * sum(sizes)
    a, b = agents(size)
    a.call(cmd="fill", seed=7, off=0, len=size)
    b.call(cmd="fill", seed=8, off=0, len=size)
    off = 0
    for n in sizes:
        for op in ("WRITE", "READ"):
            descs = [[off, n]]
            r = a.call(cmd="xfer", op=op, local=descs, remote=descs, remote_addr=b.addr,
                       peer="B", repeat=6, spin=True, timeout=30)
            assert r["state"] == "DONE", (op, n, r)
            check_same(a, off, b, off, n)
            off += n


def with_conn_info(md_b64, old, new):
    """`md_b64` (NIXL's metadata of an agent) with ZCNET's connection info `old` replaced by
    `new` of the same length (NIXL's serialization carries lengths)."""
    assert len(old) == len(new)
    raw = base64.b64decode(md_b64)
    assert raw.count(old) == 1, "the connection info is not in the metadata once"
    return base64.b64encode(raw.replace(old, new)).decode()


def test_wrong_remote_metadata_is_refused_and_the_agent_keeps_working(agents):
    """Metadata whose ZCNET connection info is not ZCNET's is refused when loaded; one that names
    a port nothing listens on fails the transfer with NIXL_ERR_REMOTE_DISCONNECT. Either way the
    agent then works with the right metadata. (ZCNET only: the connection info's format is the
    backend's own.)"""
    a, b = agents(1 << 20)
    raw = base64.b64decode(b.md)
    info = re.search(rb"zcnet1 127\.0\.0\.1:\d+ [0-9a-f]+", raw).group(0)
    garbled = with_conn_info(b.md, info, b"zcnet9" + info[6:])
    with pytest.raises(AssertionError, match="add_remote"):
        a.call(cmd="add_remote", md=garbled)
    # A port nothing listens on: a listener made and closed now leaves its port free.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_port = s.getsockname()[1]
    s.close()
    port = str(target_port(b.md)).encode()
    # Both ports are ephemeral (five digits); a shorter one is padded with leading zeros.
    dead = str(dead_port).encode().rjust(len(port), b"0")
    assert len(dead) == len(port), (dead, port)
    a.call(cmd="remove_remote", name="B")
    wrong = with_conn_info(b.md, info, info.replace(b":" + port + b" ", b":" + dead + b" "))
    assert a.call(cmd="add_remote", md=wrong)["name"] == "B"
    refused(lambda: a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]],
                           remote_addr=b.addr, peer="B", timeout=30),
            "NIXL_ERR_REMOTE_DISCONNECT")
    a.call(cmd="remove_remote", name="B")
    assert a.call(cmd="add_remote", md=b.md)["name"] == "B"
    a.call(cmd="fill", seed=9, off=0, len=4096)
    r = a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]], remote_addr=b.addr,
               peer="B", timeout=30)
    assert r["state"] == "DONE", r
    check_same(a, 0, b, 0, 4096)
