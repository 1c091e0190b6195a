"""Argument parsing the Python scripts share: bad arguments are one line naming the flag and
what to give, exit 2, as the zcnet command refuses them (docs/cli.md, "Exit codes"); sizes
written as the zcnet command takes them."""

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line naming the flag and what to give, exit 2, as the zcnet
    command refuses them (argparse prints its usage block first)."""

    def error(self, message):
        sys.stderr.write(f"{self.prog}: {message} (see --help)\n")
        sys.exit(2)


def at_least(n):
    """An argparse type: a whole number of at least n."""

    def check(s):
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{s}' is not a whole number") from None
        if v < n:
            raise argparse.ArgumentTypeError(f"{v}: give a whole number of at least {n}")
        return v

    return check


# K, M and G are powers of 1024, as in the zcnet command's sizes.
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_list(s):
    """Sizes like "4K,1M,256M" (a trailing B or iB is allowed: 4KiB, 1MB) as bytes, each above
    0; ValueError naming the part that is not one."""
    out = []
    for part in s.split(","):
        p = part.strip().upper().removesuffix("B").removesuffix("I")
        unit = p[-1] if p and p[-1] in UNITS else ""
        num = p[: len(p) - len(unit)]
        if not num.isdigit() or int(num) == 0:
            raise ValueError(f"'{part}' is not a size")
        out.append(int(num) * UNITS[unit])
    return out
