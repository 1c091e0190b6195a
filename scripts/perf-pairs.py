#!/usr/bin/env python3
"""Interleaved A/B runs of zcnet perf and iperf3 pairs with per-case flags (as root).

    scripts/perf-pairs.py [--net veth|loopback] [-P N] [--rounds R] [--secs S] CASE...

CASE is CLIENT:SERVER[:CLIENT FLAGS[:SERVER FLAGS]] with CLIENT and SERVER `i` (iperf3) or `z`
(zcnet perf), e.g. `i:i` `z:i` `"i:z::--rcvlowat off"`. Every case runs with `-t S -P N -l 128K
-J` between two namespaces made for the run (veth 10.77.0.1 -> 10.77.0.2), or on the loopback of
one of them; the namespaces are deleted on every exit path. Prints each run, then the median per
case and its ratio to the first case. ZCNET names the zcnet binary (default
target/release/zcnet). docs/perf.md gives the runs made with it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ZCNET = os.environ.get("ZCNET", "target/release/zcnet")
PAIR_TAG = f"zpp{os.getpid()}"
PORT = "5299"

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from netns_pair import ADDR_B, NetnsPair  # noqa: E402  (scripts/lib, beside this script)
from oneline_args import OneLineParser, at_least  # noqa: E402

PAIR = NetnsPair(PAIR_TAG)
NS_A, NS_B = PAIR.ns_a, PAIR.ns_b


def case(s):
    """A CASE argument, checked: CLIENT:SERVER with each `i` or `z`, then up to two flag sets."""
    parts = s.split(":")
    if not 2 <= len(parts) <= 4 or parts[0] not in ("i", "z") or parts[1] not in ("i", "z"):
        raise argparse.ArgumentTypeError(
            f"case '{s}': give CLIENT:SERVER[:CLIENT FLAGS[:SERVER FLAGS]], CLIENT and SERVER "
            "i (iperf3) or z (zcnet perf), e.g. z:i")
    return s


def prog(kind):
    return ["iperf3"] if kind == "i" else [ZCNET, "perf"]


def run(case, a):
    parts = case.split(":") + ["", ""]
    c, s, cflags, sflags = parts[:4]
    server_ns, host = (NS_B, ADDR_B) if a.net == "veth" else (NS_A, "127.0.0.1")
    srv = subprocess.Popen(
        ["ip", "netns", "exec", server_ns] + prog(s) + ["-s", "-1", "-p", PORT, "-J"] + sflags.split(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.4)
    cl = subprocess.run(
        ["ip", "netns", "exec", NS_A] + prog(c)
        + ["-c", host, "-p", PORT, "-t", str(a.secs), "-P", str(a.P), "-l", "128K", "-J"] + cflags.split(),
        capture_output=True, text=True)
    try:
        srv.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        srv.kill()
    try:
        end = json.loads(cl.stdout)["end"]
        cpu = end["cpu_utilization_percent"]
        return end["sum_received"]["bits_per_second"] / 1e9, cpu["host_total"], cpu["remote_total"]
    except (ValueError, KeyError):
        print(f"{case}: failed: {cl.stderr.strip()[-300:]}", file=sys.stderr)
        return None


def main():
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--net", choices=["veth", "loopback"], default="veth")
    p.add_argument("-P", type=at_least(1), default=4)
    p.add_argument("--rounds", type=at_least(1), default=2)
    p.add_argument("--secs", type=at_least(1), default=3)
    p.add_argument("cases", nargs="+", type=case)
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("perf-pairs.py: needs root (it makes two network namespaces): run it with sudo")
    res = {c: [] for c in a.cases}
    try:
        PAIR.setup()
        for r in range(a.rounds):
            for c in a.cases:
                x = run(c, a)
                if x:
                    res[c].append(x)
                    print(f"round {r + 1}: {c:44s} {x[0]:6.2f} Gbit/s  CPU % client {x[1]:5.1f} server {x[2]:5.1f}", flush=True)
    finally:
        PAIR.teardown()
    first = [x[0] for x in res[a.cases[0]]]
    base = statistics.median(first) if first else None
    print(f"{a.net} -P {a.P}, -t {a.secs}, median of {a.rounds}:")
    for c in a.cases:
        v = [x[0] for x in res[c]]
        if v:
            m = statistics.median(v)
            ratio = f"{m / base:4.2f}x" if base else "-"
            print(f"  {c:44s} {m:6.2f} Gbit/s  {ratio}")


if __name__ == "__main__":
    main()
