"""Argument parsing the Python scripts share: bad arguments are one line naming the flag and
what to give, exit 2, as the zcnet command refuses them (docs/cli.md, "Exit codes")."""

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
