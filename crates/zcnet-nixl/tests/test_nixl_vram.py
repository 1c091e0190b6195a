"""VRAM_SEG: agents register device memory as NIXL's VRAM and move it through the ZCNET backend,
which reaches it through zcnet's GPU code (staged through host memory, src/transport/device.rs).

Without a GPU the device is zcnet's CUDA driver stand-in (scripts/lib/cuda_standin.py builds
crates/zcnet-sys/tests/cuda-standin/standin.c), loaded by zcnet and by the worker through
ZCNET_LIBCUDA: its device memory is a mapping the CPU cannot touch (a backend that read or wrote
VRAM as host memory would crash the agent), its contents are read back with cuMemcpyDtoH to
compare every byte, and a process that leaked a driver object (a context, a registration)
exits 86 at the end, which fails the test. NOT a GPU: nothing here measures speed."""

import sys

import pytest

from conftest import REPO, Worker
from test_nixl_transfer import check_same

sys.path.insert(0, str(REPO / "scripts" / "lib"))
import cuda_standin  # noqa: E402  (scripts/lib)

DRAM = (16 << 20) + (1 << 20)
VRAM = (16 << 20) + (1 << 20)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return cuda_standin.for_pytest(tmp_path_factory)


def digest(w, mem, off, n):
    return w.call(cmd="digest", mem=mem, off=off, len=n)["sha"]


def test_vram_write_and_read_with_dram_and_vram(plugin_dir, standin, tmp_path):
    """WRITE and READ between VRAM and DRAM both ways and VRAM to VRAM, 1 B to 16 MiB, three
    descriptors per request (small ones travel in the frame, large ones through the sender's
    buffers), notifications in order; every byte compared by reading device memory back."""
    made = []
    summaries = {}
    try:
        for name in ("A", "B"):
            summaries[name] = tmp_path / f"standin-{name}.txt"
            env = {"ZCNET_LIBCUDA": str(standin), "ZCNET_STANDIN_SUMMARY": str(summaries[name])}
            made.append(Worker(plugin_dir, name, DRAM, env=env, vram=VRAM))
        a, b = made
        assert a.vaddr and b.vaddr
        a.call(cmd="add_remote", md=b.md)
        b.call(cmd="add_remote", md=a.md)
        base = {("A", "DRAM"): a.addr, ("A", "VRAM"): a.vaddr,
                ("B", "DRAM"): b.addr, ("B", "VRAM"): b.vaddr}
        want = []
        seed = 100
        for lm, rm in (("VRAM", "DRAM"), ("DRAM", "VRAM"), ("VRAM", "VRAM")):
            for op in ("WRITE", "READ"):
                for size in (1, 4096 + 1, 16 << 20):
                    # Three descriptors: `size` at an odd offset, 7 B, and 20 KiB + 3.
                    descs = [[5, size], [size + 100, 7], [size + 200, (20 << 10) + 3]]
                    src, smem = (a, lm) if op == "WRITE" else (b, rm)
                    dst, dmem = (b, rm) if op == "WRITE" else (a, lm)
                    for off, n in descs:
                        seed += 1
                        src.call(cmd="fill", mem=smem, seed=seed, off=off, len=n)
                        dst.call(cmd="fill", mem=dmem, seed=seed + 5000, off=off, len=n)
                    notif = f"{op} {lm}->{rm} {size}"
                    r = a.call(cmd="xfer", op=op, local=descs, remote=descs, local_mem=lm,
                               remote_mem=rm, remote_addr=base[("B", rm)], peer="B", notif=notif)
                    assert r["state"] == "DONE", (notif, r)
                    for off, n in descs:
                        assert digest(a, lm, off, n) == digest(b, rm, off, n), (notif, off, n)
                    want.append(["A", notif])
        assert b.call(cmd="notifs", want=len(want))["notifs"] == want
    finally:
        for w in made:
            w.close()  # fails on a non-zero exit: 86 is the stand-in's leak report
    for name, path in summaries.items():
        s = cuda_standin.summary(path)
        assert s["violation"] == "none", (name, s)
        leaks = {k: v for k, v in s.items() if k.startswith("leaked_") and v != "0"}
        assert not leaks, (name, leaks)
        assert int(s["pending_copies"]) == 0, (name, s)


def test_vram_without_a_cuda_driver_is_refused(plugin_dir, standin, tmp_path):
    """zcnet finds no CUDA driver (ZCNET_LIBCUDA names a file that does not exist, while the
    worker allocates its device memory with the stand-in): registering VRAM fails with
    NIXL_ERR_BACKEND (zcnet's cause on stderr), and the agent's DRAM works."""
    env = {"ZCNET_LIBCUDA": str(tmp_path / "no-such-libcuda.so.1"),
           "ZCNET_TEST_LIBCUDA": str(standin)}
    with pytest.raises(AssertionError, match="NIXL_ERR_BACKEND"):
        Worker(plugin_dir, "A", 4096, env=env, vram=1 << 20)
    a = Worker(plugin_dir, "A", 4096, env=env)
    b = Worker(plugin_dir, "B", 4096)
    try:
        a.call(cmd="add_remote", md=b.md)
        a.call(cmd="fill", seed=1, off=0, len=4096)
        r = a.call(cmd="xfer", op="WRITE", local=[[0, 4096]], remote=[[0, 4096]],
                   remote_addr=b.addr, peer="B")
        assert r["state"] == "DONE", r
        check_same(a, 0, b, 0, 4096)
    finally:
        a.close()
        b.close()

