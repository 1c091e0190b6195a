"""Sending datagrams: zcnet.Sender on a connected UDP socket sends each object as one datagram,
in every mode, and refuses one that does not fit."""

import socket

import numpy as np
import pytest

import zcnet


def udp_pair():
    """A receiving UDP socket on 127.0.0.1 and a sending one connected to it."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.settimeout(10)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.connect(rx.getsockname())
    return rx, tx


@pytest.mark.parametrize("mode", ["auto", "copy", "msg-zerocopy", "uring", "uring-zc"])
def test_each_send_is_one_datagram(mode):
    rx, sock = udp_pair()
    tx = zcnet.Sender(sock, mode=mode)
    rng = np.random.default_rng(7)
    msgs = [rng.integers(0, 255, n, dtype=np.uint8) for n in (1, 1472, 9000, 64000, 33)]
    msgs.append(np.arange(1000, dtype=np.float32))
    for m in msgs:
        assert tx.send(m) == m.nbytes
    st = tx.finish()
    assert st["bytes"] == sum(m.nbytes for m in msgs)
    assert st["zerocopy_bytes"] + st["copied_bytes"] == st["bytes"]
    for m in msgs:
        got = rx.recv(65536)
        assert got == m.tobytes(), f"{mode}: datagram of {m.nbytes} B"
    rx.close()


def test_a_datagram_larger_than_the_buffer_is_refused_with_the_fix():
    rx, sock = udp_pair()
    tx = zcnet.Sender(sock, mode="uring", buf_size=4096)
    with pytest.raises(ValueError, match="one datagram.*buf_size"):
        tx.send(bytes(4097))
    assert tx.send(bytes(4096)) == 4096
    tx.finish()
    assert len(rx.recv(65536)) == 4096
    rx.close()


def test_an_unconnected_udp_socket_is_refused():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with pytest.raises(OSError):
        zcnet.Sender(s)
    s.close()


def test_a_receiver_still_refuses_datagram_sockets():
    rx, sock = udp_pair()
    with pytest.raises(TypeError, match="TCP"):
        zcnet.Receiver().add(sock)
    rx.close()
    sock.close()
