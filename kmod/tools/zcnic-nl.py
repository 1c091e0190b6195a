#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Ring settings and per-queue statistics over generic netlink, for the zcnic proofs.

    zcnic-nl.py rings IFNAME [--split on|off] [--hds-thresh N]
    zcnic-nl.py qstats IFNAME

rings: Debian bookworm's ethtool (6.1) does not know tcp-data-split; this speaks
the ethtool family directly (RINGS_SET, then RINGS_GET) and prints
`tcp-data-split on|off|unknown hds-thresh N`.
qstats: the netdev family's per-queue statistics (QSTATS_GET, queue scope), one
line per queue: `rx 2 packets 88 bytes 2005896 alloc-fail 0 hw-drops 0`.
Exit 1 with the kernel's message when the kernel refuses.
"""
import argparse
import os
import socket
import struct
import sys

NETLINK_GENERIC = 16
GENL_ID_CTRL = 16
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NLMSG_DONE = 3
NLMSG_ERROR = 2
NLA_F_NESTED = 1 << 15
NLMSGERR_ATTR_MSG = 1
# include/uapi/linux/ethtool_netlink_generated.h
ETHTOOL_MSG_RINGS_GET, ETHTOOL_MSG_RINGS_SET = 15, 16
ETHTOOL_A_RINGS_HEADER = 1
ETHTOOL_A_RINGS_TCP_DATA_SPLIT = 11
ETHTOOL_A_RINGS_HDS_THRESH = 17
ETHTOOL_A_HEADER_DEV_NAME = 2
SPLIT = {0: "unknown", 1: "off", 2: "on"}
# include/uapi/linux/netdev.h
NETDEV_CMD_QSTATS_GET = 12
NETDEV_A_QSTATS_IFINDEX, NETDEV_A_QSTATS_QUEUE_TYPE, NETDEV_A_QSTATS_QUEUE_ID = 1, 2, 3
NETDEV_A_QSTATS_SCOPE = 4
NETDEV_QSTATS_SCOPE_QUEUE = 1
QSTATS = {8: "packets", 9: "bytes", 10: "packets", 11: "bytes", 12: "alloc-fail", 13: "hw-drops"}
QSTATS_TX_DROPS = 24  # NETDEV_A_QSTATS_TX_HW_DROPS


def attr(kind, payload):
    n = 4 + len(payload)
    return struct.pack("HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def attrs(buf):
    out, off = {}, 0
    while off + 4 <= len(buf):
        n, kind = struct.unpack_from("HH", buf, off)
        if n < 4:
            break
        out[kind & 0x3FFF] = buf[off + 4:off + n]
        off += (n + 3) & ~3
    return out


def request(sock, family, cmd, payload, seq, dump=False):
    body = struct.pack("BBH", cmd, 1, 0) + payload
    flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
    msg = struct.pack("IHHII", 16 + len(body), family, flags, seq, 0) + body
    sock.send(msg)
    reply, replies = None, []
    while True:
        data = sock.recv(65536)
        off = 0
        while off + 16 <= len(data):
            n, kind, _flags, _seq, _pid = struct.unpack_from("IHHII", data, off)
            if kind == NLMSG_DONE:
                return replies
            if kind == NLMSG_ERROR:
                err = struct.unpack_from("i", data, off + 16)[0]
                if err:
                    inner = struct.unpack_from("I", data, off + 20)[0]
                    ext = attrs(data[off + 20 + inner:off + n])
                    why = ext.get(NLMSGERR_ATTR_MSG, b"").rstrip(b"\0").decode()
                    raise OSError(-err, f"{os.strerror(-err)}" + (f": {why}" if why else ""))
                return reply
            reply = attrs(data[off + 20:off + n])
            replies.append(reply)
            off += (n + 3) & ~3


def family_id(sock, name):
    fam = request(sock, GENL_ID_CTRL, CTRL_CMD_GETFAMILY,
                  attr(CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0"), 1)
    return struct.unpack("H", fam[CTRL_ATTR_FAMILY_ID][:2])[0]


def uint(b):
    return int.from_bytes(b, "little")


def rings(sock, a):
    family = family_id(sock, "ethtool")
    hdr = attr(ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED,
               attr(ETHTOOL_A_HEADER_DEV_NAME, a.ifname.encode() + b"\0"))
    if a.split is not None or a.hds_thresh is not None:
        body = hdr
        if a.split is not None:
            body += attr(ETHTOOL_A_RINGS_TCP_DATA_SPLIT, bytes([2 if a.split == "on" else 1]))
        if a.hds_thresh is not None:
            body += attr(ETHTOOL_A_RINGS_HDS_THRESH, struct.pack("I", a.hds_thresh))
        request(sock, family, ETHTOOL_MSG_RINGS_SET, body, 2)
    got = request(sock, family, ETHTOOL_MSG_RINGS_GET, hdr, 3)
    split = SPLIT.get(got.get(ETHTOOL_A_RINGS_TCP_DATA_SPLIT, b"\0")[0], "?")
    hds = uint(got[ETHTOOL_A_RINGS_HDS_THRESH]) if ETHTOOL_A_RINGS_HDS_THRESH in got else "n/a"
    print(f"tcp-data-split {split} hds-thresh {hds}")


def qstats(sock, a):
    family = family_id(sock, "netdev")
    idx = socket.if_nametoindex(a.ifname)
    body = attr(NETDEV_A_QSTATS_IFINDEX, struct.pack("I", idx)) + \
        attr(NETDEV_A_QSTATS_SCOPE, struct.pack("I", NETDEV_QSTATS_SCOPE_QUEUE))
    for q in request(sock, family, NETDEV_CMD_QSTATS_GET, body, 2, dump=True):
        kind = "tx" if uint(q.get(NETDEV_A_QSTATS_QUEUE_TYPE, b"\0")) else "rx"
        qid = uint(q.get(NETDEV_A_QSTATS_QUEUE_ID, b"\0"))
        line = f"{kind} {qid}"
        for k, name in QSTATS.items():
            if k in q:
                line += f" {name} {uint(q[k])}"
        if QSTATS_TX_DROPS in q:
            line += f" hw-drops {uint(q[QSTATS_TX_DROPS])}"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rings")
    r.add_argument("ifname")
    r.add_argument("--split", choices=["on", "off"])
    r.add_argument("--hds-thresh", type=int)
    q = sub.add_parser("qstats")
    q.add_argument("ifname")
    a = ap.parse_args()
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    sock.bind((0, 0))
    try:
        (rings if a.cmd == "rings" else qstats)(sock, a)
    except OSError as e:
        print(f"zcnic-nl: {a.ifname}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
