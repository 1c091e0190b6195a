#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the replies captured on Linux 6.18
(crates/zcnet-netlink/tests/captured/*.hex): reply attributes for the parser targets,
whole datagrams and error payloads for the wire targets, ioctl images for ntuple_rxnfc."""
import hashlib, os, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
cap = os.path.join(here, "..", "crates", "zcnet-netlink", "tests", "captured")
out = os.path.join(here, "corpus")

def target_for(name, cmd):
    if name.startswith("ctrl_"): return ["genl_family"]
    if name.startswith("ethtool_strset") or name.startswith("ethtool_features"): return ["ethtool_features"]
    name = name.split("_", 1)[-1]  # drop the family prefix (netdev_, ethtool_)
    for key, t in [("dev_", "netdev_dev"), ("queue", "netdev_queue"), ("napi", "netdev_napi"),
                   ("qstats", "netdev_qstats"), ("page_pool", "netdev_page_pool"),
                   ("rings", "ethtool_rings"), ("channels", "ethtool_channels"), ("rss", "ethtool_rss")]:
        if key in name: return [t]
    return []

def save(target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)

n = 0
for fn in sorted(os.listdir(cap)):
    name = fn[:-4]
    for line in open(os.path.join(cap, fn)):
        if line.startswith("< "):
            dg = bytes.fromhex(line[2:].strip())
            if name.startswith("ioctl_"):
                save("ntuple_rxnfc", dg); n += 1; continue
            save("wire_attrs", dg); n += 1
            i = 0
            while i + 16 <= len(dg):
                ln, ty, fl = struct.unpack_from("=IHH", dg, i)
                if ln < 16: break
                body = dg[i + 16:i + ln]
                if ty in (2, 3):
                    save("wire_extack", bytes([fl >> 8]) + body); n += 1
                elif len(body) >= 4:
                    for t in target_for(name, body[0]):
                        save(t, body[4:]); n += 1
                i += (ln + 3) & ~3
        elif line.startswith("> ") and name.startswith("ioctl_"):
            save("ntuple_rxnfc", bytes.fromhex(line[2:].strip())); n += 1
print(f"{n} seeds written under {out}", file=sys.stderr)
