#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Get or set a device's tcp-data-split and hds-thresh through ethtool netlink.

    zcnic-rings.py IFNAME [--split on|off] [--hds-thresh N]

Debian bookworm's ethtool (6.1) does not know tcp-data-split; this speaks the
ethtool generic netlink family directly (RINGS_SET, then RINGS_GET) and prints
`tcp-data-split on|off|unknown hds-thresh N`. Exit 1 with the kernel's message
when the kernel refuses.
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
NLM_F_REQUEST, NLM_F_ACK = 1, 4
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


def request(sock, family, cmd, payload, seq):
    body = struct.pack("BBH", cmd, 1, 0) + payload
    msg = struct.pack("IHHII", 16 + len(body), family, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body
    sock.send(msg)
    reply = None
    while True:
        data = sock.recv(65536)
        off = 0
        while off + 16 <= len(data):
            n, kind, _flags, _seq, _pid = struct.unpack_from("IHHII", data, off)
            if kind == NLMSG_ERROR:
                err = struct.unpack_from("i", data, off + 16)[0]
                if err:
                    inner = struct.unpack_from("I", data, off + 20)[0]
                    ext = attrs(data[off + 20 + inner:off + n])
                    why = ext.get(NLMSGERR_ATTR_MSG, b"").rstrip(b"\0").decode()
                    raise OSError(-err, f"{os.strerror(-err)}" + (f": {why}" if why else ""))
                return reply
            reply = attrs(data[off + 20:off + n])
            off += (n + 3) & ~3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ifname")
    ap.add_argument("--split", choices=["on", "off"])
    ap.add_argument("--hds-thresh", type=int)
    a = ap.parse_args()
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    sock.bind((0, 0))
    fam = request(sock, GENL_ID_CTRL, CTRL_CMD_GETFAMILY,
                  attr(CTRL_ATTR_FAMILY_NAME, b"ethtool\0"), 1)
    family = struct.unpack("H", fam[CTRL_ATTR_FAMILY_ID][:2])[0]
    hdr = attr(ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED,
               attr(ETHTOOL_A_HEADER_DEV_NAME, a.ifname.encode() + b"\0"))
    try:
        if a.split is not None or a.hds_thresh is not None:
            body = hdr
            if a.split is not None:
                body += attr(ETHTOOL_A_RINGS_TCP_DATA_SPLIT, bytes([2 if a.split == "on" else 1]))
            if a.hds_thresh is not None:
                body += attr(ETHTOOL_A_RINGS_HDS_THRESH, struct.pack("I", a.hds_thresh))
            request(sock, family, ETHTOOL_MSG_RINGS_SET, body, 2)
        got = request(sock, family, ETHTOOL_MSG_RINGS_GET, hdr, 3)
    except OSError as e:
        print(f"zcnic-rings: {a.ifname}: {e.strerror}", file=sys.stderr)
        return 1
    split = SPLIT.get(got.get(ETHTOOL_A_RINGS_TCP_DATA_SPLIT, b"\0")[0], "?")
    hds = struct.unpack("I", got[ETHTOOL_A_RINGS_HDS_THRESH])[0] if ETHTOOL_A_RINGS_HDS_THRESH in got else "n/a"
    print(f"tcp-data-split {split} hds-thresh {hds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
