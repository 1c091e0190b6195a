"""zcnet.Receiver on a NIC queue (iface=, queue=, mem=): the arguments are checked before anything
is made, and what the kernel refuses is a zcnet.Error naming the interface, with nothing left
behind. Receiving for real needs a NIC with memory providers: scripts/hw-suite.sh's py-zcrx,
py-zcrx-udmabuf and py-devmem run it against the software NIC (kmod/zcnic) in the kernel lab."""

import os

import pytest

import zcnet

UDMABUF = os.path.exists("/dev/udmabuf")


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("mode", ["copy", "uring", "auto"])
def test_udmabuf_needs_a_queue_mode(mode):
    with pytest.raises(ValueError, match=r'mem="udmabuf".*mode="zcrx" or "devmem", not mode="%s"' % mode):
        zcnet.Receiver(mode=mode, iface="lo", mem="udmabuf")


@pytest.mark.parametrize("mode", ["zcrx", "devmem"])
def test_udmabuf_needs_an_interface(mode):
    with pytest.raises(ValueError, match=r"give iface="):
        zcnet.Receiver(mode=mode, mem="udmabuf")


def test_an_unknown_memory_names_the_choices():
    with pytest.raises(ValueError, match=r'mem="dram".*"host".*"udmabuf".*"cuda:N"'):
        zcnet.Receiver(mode="zcrx", iface="lo", mem="dram")


def test_a_queue_is_a_number():
    with pytest.raises((TypeError, OverflowError)):
        zcnet.Receiver(mode="zcrx", iface="lo", queue=-1)
    with pytest.raises(TypeError):
        zcnet.Receiver(mode="zcrx", iface="lo", queue="last")


def test_an_unknown_interface_is_named():
    with pytest.raises(zcnet.Error, match=r"zcnet-nosuch0"):
        zcnet.Receiver(mode="zcrx", iface="zcnet-nosuch0")


@pytest.mark.parametrize("mode,mem", [("zcrx", None), ("zcrx", "udmabuf"), ("devmem", "udmabuf")])
def test_lo_refuses_and_nothing_is_left(mode, mem):
    """lo has no queue management: the kernel's refusal (or, without /dev/udmabuf, the udmabuf's)
    is an error naming it, and twenty refusals leave no file descriptor (ring, dma-buf) open."""
    before = open_fds()
    for _ in range(20):
        with pytest.raises(zcnet.Error) as e:
            zcnet.Receiver(mode=mode, iface="lo", mem=mem)
    msg = str(e.value)
    assert "\n" not in msg
    if isinstance(e.value, zcnet.NotRootError):
        assert "root" in msg or "CAP_NET_ADMIN" in msg, msg
    elif mem == "udmabuf" and not UDMABUF:
        assert isinstance(e.value, zcnet.UnsupportedError), msg
        assert "/dev/udmabuf" in msg, msg
    else:
        assert isinstance(e.value, zcnet.UnsupportedError), msg
        assert "lo" in msg and "not supported" in msg, msg
    assert open_fds() == before


def test_stats_name_the_memory():
    rx = zcnet.Receiver(mode="copy")
    assert rx.stats()["mem"] == "host"


EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "nic_recv.py")


@pytest.mark.parametrize(
    "args,code,words",
    [
        ([], 2, ["--listen IP:PORT is needed"]),
        (["--listen", "127.0.0.1:0"], 2, ["--iface IF is needed"]),
        (["--listen", "127.0.0.1:0", "--iface", "lo", "--rx", "devmem"], 2, ["add --mem udmabuf"]),
        (["--listen", "127.0.0.1:0", "--iface", "lo", "--rx", "copy", "--mem", "udmabuf"], 2,
         ['mode="zcrx" or "devmem"']),
        (["--listen", "127.0.0.1:0", "--iface", "lo", "--queue", "last"], 2, ["--queue wants a number"]),
        (["--listen", "127.0.0.1:0", "--iface", "lo", "--timeout", "10"], 1, ["lo"]),
    ],
)
def test_the_nic_example_refuses_in_one_line(args, code, words):
    """examples/nic_recv.py (run for real by scripts/hw-suite.sh on the software NIC): bad
    arguments are one line and exit 2; a queue lo cannot give is zcnet's line and exit 1."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, EXAMPLE, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == code, r.stderr
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
