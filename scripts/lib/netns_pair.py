"""Two network namespaces joined by a veth pair, for the Python benchmark scripts (as root).

    pair = NetnsPair("zpp1234")        # namespaces zpp1234a and zpp1234b
    pair.setup()                       # veth 10.77.0.1/24 (in a) <-> 10.77.0.2/24 (in b), lo up
    ...                                # pair.exec_a / pair.exec_b: ["ip", "netns", "exec", NS]
    pair.teardown()                    # deletes both; safe to call twice or after a failed setup

Nothing is sent outside them: the addresses are assigned here, in namespaces made here."""

import subprocess

ADDR_A, ADDR_B = "10.77.0.1", "10.77.0.2"


class NetnsPair:
    def __init__(self, tag):
        self.tag = tag
        self.ns_a, self.ns_b = f"{tag}a", f"{tag}b"
        self.dev_a, self.dev_b = f"{tag}x", f"{tag}y"
        self.exec_a = ["ip", "netns", "exec", self.ns_a]
        self.exec_b = ["ip", "netns", "exec", self.ns_b]

    def setup(self):
        """Makes the namespaces and the link; raises (after deleting what it made) on failure."""
        a, b = self.ns_a, self.ns_b
        try:
            for c in [
                ["ip", "netns", "add", a],
                ["ip", "netns", "add", b],
                ["ip", "link", "add", self.dev_a, "netns", a, "type", "veth",
                 "peer", "name", self.dev_b, "netns", b],
                ["ip", "-n", a, "addr", "add", f"{ADDR_A}/24", "dev", self.dev_a],
                ["ip", "-n", b, "addr", "add", f"{ADDR_B}/24", "dev", self.dev_b],
                ["ip", "-n", a, "link", "set", self.dev_a, "up"],
                ["ip", "-n", b, "link", "set", self.dev_b, "up"],
                ["ip", "-n", a, "link", "set", "lo", "up"],
                ["ip", "-n", b, "link", "set", "lo", "up"],
            ]:
                r = subprocess.run(c, capture_output=True, text=True, timeout=30)
                if r.returncode != 0:
                    raise RuntimeError(f"{' '.join(c)}: {r.stderr.strip()}")
        except BaseException:
            self.teardown()
            raise

    def teardown(self):
        for ns in (self.ns_a, self.ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
