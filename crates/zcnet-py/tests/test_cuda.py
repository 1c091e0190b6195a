"""CUDA device memory from Python: Sender.send of device tensors (staged by the library's GPU
pipeline), Receiver.recv_into a device tensor, zcnet.cuda_buffer / DeviceBuffer, and the
refusals.

Without a GPU these run against zcnet's CUDA driver stand-in
(crates/zcnet-sys/tests/cuda-standin/standin.c, built here with `cc` as zcnet-testkit builds
it): a fake libcuda.so.1 whose device memory the CPU cannot touch, whose asynchronous copies
complete only when waited for, and which exits 86 when a process leaked a driver object. It is
NOT a GPU: these tests check bytes, paths and the driver's contract, never speed. CUDA is opened
once per process, so every case runs its code in a child interpreter with ZCNET_LIBCUDA and
ZCNET_STANDIN_SUMMARY set, and the parent checks its exit status and the stand-in's summary.

The torch test runs on a real GPU only (torch.cuda.is_available()), with the real driver.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts" / "lib"))
import cuda_standin  # noqa: E402  (scripts/lib: the stand-in's build, shared with zcnet-nixl)

LEAK_EXIT = cuda_standin.LEAK_EXIT
CHILD_TIMEOUT = 180

# What every child starts with: a loopback listener, a reader thread, zcnet's pattern.
PRELUDE = textwrap.dedent(
    """
    import gc, socket, sys, threading
    import zcnet

    def listener():
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        ls.settimeout(30)
        return ls

    def connect(ls):
        return socket.create_connection(ls.getsockname(), timeout=30)

    class Reader(threading.Thread):
        # Accepts one connection on `ls` and reads it to its end.
        def __init__(self, ls):
            super().__init__(daemon=True)
            self.ls, self.data, self.exc = ls, None, None
            self.start()

        def run(self):
            try:
                c, _ = self.ls.accept()
                c.settimeout(60)
                chunks = []
                while True:
                    b = c.recv(1 << 20)
                    if not b:
                        break
                    chunks.append(b)
                c.close()
                self.data = b"".join(chunks)
            except BaseException as e:
                self.exc = e

        def result(self):
            self.join(120)
            assert not self.is_alive(), "the reader did not finish"
            if self.exc is not None:
                raise self.exc
            return self.data

    def pattern(off, n, seed=7):
        return zcnet.pattern(seed, off, n)

    def pattern_stream(total):
        # A connection whose peer writes pattern(0, total) and closes: (conn, writer thread).
        ls = listener()
        peer = connect(ls)
        conn, _ = ls.accept()
        def write():
            peer.sendall(pattern(0, total))
            peer.close()
        w = threading.Thread(target=write, daemon=True)
        w.start()
        return conn, w
    """
)


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """The stand-in's libcuda.so.1, compiled with the flags zcnet-testkit uses."""
    return cuda_standin.for_pytest(tmp_path_factory)


def run_child(code, tmp_path, standin=None, timeout=CHILD_TIMEOUT):
    """Runs PRELUDE + `code` in a fresh interpreter (with the stand-in as libcuda when given);
    returns (stdout, the stand-in's summary as a dict or None). Fails on a non-zero exit, and on
    anything the stand-in reports: a leak, a pending copy at exit, a broken rule."""
    env = dict(os.environ)
    summary = tmp_path / "standin-summary.txt"
    if standin is not None:
        env["ZCNET_LIBCUDA"] = str(standin)
        env["ZCNET_STANDIN_SUMMARY"] = str(summary)
    r = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    what = f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    if r.returncode == LEAK_EXIT and standin is not None:
        pytest.fail(f"the stand-in found driver objects leaked at exit (exit 86): {what}")
    assert r.returncode == 0, what
    if standin is None:
        return r.stdout, None
    assert summary.exists(), f"the child never loaded the stand-in: {what}"
    fields = dict(line.split("=", 1) for line in summary.read_text().splitlines() if "=" in line)
    assert fields.get("violation") == "none", f"{fields}\n{what}"
    for k in (
        "leaked_allocations",
        "leaked_registrations",
        "leaked_streams",
        "leaked_events",
        "leaked_contexts",
        "pending_copies",
    ):
        assert fields.get(k) == "0", f"{k}: {fields}\n{what}"
    return r.stdout, fields


@pytest.mark.parametrize("mode", ["auto", "copy"])
def test_send_64_mib_from_device_buffers(standin, tmp_path, mode):
    """64 MiB from device buffers filled with the pattern (with host sends before, between and
    after them on the same sender), every byte checked on the host side."""
    out, s = run_child(
        f"""
        MiB = 1 << 20
        ls = listener()
        reader = Reader(ls)
        tx = zcnet.Sender(connect(ls), mode={mode!r})
        plan = [("host", 1000), ("dev", 16 * MiB), ("dev", 16 * MiB + 4093), ("host", 100000),
                ("dev", 16 * MiB), ("dev", 16 * MiB - 4093), ("host", 77)]
        off = 0
        for kind, n in plan:
            if kind == "host":
                assert tx.send(pattern(off, n)) == n
            else:
                d = zcnet.cuda_buffer(n)
                d.fill(pattern(off, n))
                assert d.__dlpack_device__() == (2, 0)
                assert tx.send(d) == n
                del d  # the copies out of it completed when send returned
            off += n
        st = tx.finish()
        got = reader.result()
        assert st["device_bytes"] == 64 * MiB, st
        assert st["bytes"] == off == len(got), (st, off, len(got))
        want = pattern(0, off)
        if got != want:
            i = next(i for i in range(off) if got[i] != want[i])
            sys.exit(f"byte {{i}} differs: {{got[i]}} for {{want[i]}}")
        del tx
        gc.collect()
        print("ok", off)
        """,
        tmp_path,
        standin,
    )
    assert out.strip().startswith("ok"), out
    # Staged: device-to-host copies through the stand-in's asynchronous path, none synchronous.
    assert int(s["async_dtoh"]) >= (64 << 20) // (64 << 10), s
    assert s["device"] == "zcnet stand-in", s


@pytest.mark.parametrize("mode", ["auto", "copy"])
def test_udp_sender_sends_each_device_buffer_as_one_datagram(standin, tmp_path, mode):
    """On a UDP sender each send of a device buffer is one datagram holding its bytes, in order
    with host datagrams on the same sender, every byte checked where it arrives."""
    out, s = run_child(
        f"""
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sink.bind(("127.0.0.1", 0))
        sink.settimeout(30)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.connect(sink.getsockname())
        tx = zcnet.Sender(u, mode={mode!r})
        plan = [("host", 100), ("dev", 1), ("dev", 64000), ("host", 5000), ("dev", 4093),
                ("dev", 64000), ("host", 7)]
        sent, off, dev = [], 0, 0
        for kind, n in plan:
            want = pattern(off, n)
            if kind == "host":
                assert tx.send(want) == n
            else:
                d = zcnet.cuda_buffer(n)
                d.fill(want)
                assert tx.send(d) == n
                del d  # copied out when send returned
                dev += n
            sent.append(want)
            off += n
        st = tx.finish()
        for i, want in enumerate(sent):
            got = sink.recv(65536)
            if got != want:
                sys.exit(f"datagram {{i}}: {{len(got)}} B, not the {{len(want)}} B sent")
        assert st["device_bytes"] == dev, st
        assert st["bytes"] == off, (st, off)
        del tx
        gc.collect()
        print("ok", len(sent))
        """,
        tmp_path,
        standin,
    )
    assert out.strip() == "ok 7", out
    assert s["device"] == "zcnet stand-in", s


@pytest.mark.parametrize("mode", ["copy", "uring"])
def test_recv_into_device_buffers(standin, tmp_path, mode):
    """recv_into a DeviceBuffer fills it with the next bytes received; tobytes() gives them
    back; received host Buffers still say kDLCPU. With uring, whole buffers go by asynchronous
    copies out of the pinned receive ring (a buffer taken in part, synchronously); with copy,
    every buffer synchronously, and the stats say why."""
    out, s = run_child(
        f"""
        MODE = {mode!r}
""" + """
        total = (5 << 20) + 123
        conn, w = pattern_stream(total)
        rx = zcnet.Receiver(mode=MODE)
        rx.add(conn)
        first = next(iter(rx))
        assert first.__dlpack_device__() == (1, 0)
        head = first.tobytes()
        del first
        a = zcnet.cuda_buffer(3 << 20)
        b = zcnet.cuda_buffer(total)  # more than is left: filled in part at the end
        assert rx.recv_into(a) == len(a)
        left = total - len(head) - len(a)
        assert rx.recv_into(b) == left
        assert rx.recv_into(b) == 0
        w.join(60)
        assert head + a.tobytes() + b.tobytes()[:left] == pattern(0, total)
        dev = rx.stats()["device_copies"]
        assert dev["async_bytes"] + dev["sync_bytes"] == total - len(head), dev
        if MODE == "uring":
            assert dev["async_refused"] is None, dev
            assert dev["async_bytes"] >= 4 << 20, dev
        else:
            assert dev["async_bytes"] == 0 and "uring" in dev["async_refused"], dev
        print("device_copies", dev)
        # The memory lives as long as a DLPack capsule of it: dropping the buffer first is fine.
        cap = a.__dlpack__(max_version=(1, 0))
        del a, b
        gc.collect()
        del cap
        gc.collect()
        del rx
        gc.collect()
        print("ok")
        """,
        tmp_path,
        standin,
    )
    assert out.strip().endswith("ok"), out
    if mode == "uring":
        assert int(s["async_htod"]) >= 64, s
        assert int(s["registers"]) >= 1, s
    else:
        assert int(s["sync_htod"]) >= 80 and int(s["async_htod"]) == 0, s


def test_refusals_are_one_line(standin, tmp_path):
    """Non-contiguous, read-only, wrong-device and oversized-datagram cases are refused with one
    line each, and
    the sender still works after a refusal."""
    out, _ = run_child(
        """
        import ctypes

        class DLDevice(ctypes.Structure):
            _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

        class DLDataType(ctypes.Structure):
            _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

        class DLTensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                        ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

        class DLManagedTensorVersioned(ctypes.Structure):
            _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                        ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                        ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        keep = []

        class Fake:
            # A DLPack producer of any device, shape, strides and flags (the memory: `ptr`).
            def __init__(self, ptr, dev, shape, strides=None, flags=0):
                self.ptr, self.dev, self.shape, self.strides, self.flags = ptr, dev, shape, strides, flags

            def __dlpack_device__(self):
                return self.dev

            def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
                n = len(self.shape)
                shape = (ctypes.c_int64 * n)(*self.shape)
                strides = (ctypes.c_int64 * n)(*self.strides) if self.strides else None
                m = DLManagedTensorVersioned(1, 0, None, None, self.flags, DLTensor(
                    self.ptr, DLDevice(*self.dev), n, DLDataType(1, 8, 1), shape,
                    strides if strides is not None else None, 0))
                keep.extend([shape, strides, m])
                return capsule_new(ctypes.addressof(m), b"dltensor_versioned", None)

        def refused(call, exc, words):
            try:
                call()
            except exc as e:
                msg = str(e)
                assert "\\n" not in msg, msg
                assert words in msg, (words, msg)
                print("refused:", msg)
                return
            raise AssertionError(f"not refused: {words}")

        d = zcnet.cuda_buffer(1 << 16)
        d.fill(pattern(0, 1 << 16))
        ls = listener()
        reader = Reader(ls)
        tx = zcnet.Sender(connect(ls))
        noncontig = Fake(d.data_ptr(), (2, 0), (128, 128), (1, 256))
        refused(lambda: tx.send(noncontig), ValueError, "not C-contiguous")
        rocm = Fake(d.data_ptr(), (10, 0), (16,))
        refused(lambda: tx.send(rocm), ValueError, "DLPack device type 10")
        other_gpu = Fake(d.data_ptr(), (2, 3), (16,))
        refused(lambda: tx.send(other_gpu), zcnet.ArgumentError, "cuda:3")
        refused(lambda: zcnet.cuda_buffer(16, device=1), zcnet.ArgumentError, "cuda:1")
        refused(lambda: d.fill(b"x" * ((1 << 16) + 1)), ValueError, "do not fit")
        refused(lambda: d.__dlpack__(dl_device=(1, 0)), BufferError, "cannot be exported")
        # Still sends after the refusals.
        assert tx.send(d) == 1 << 16
        tx.finish()
        assert reader.result() == pattern(0, 1 << 16)

        # recv_into: a read-only or non-contiguous device tensor is refused before anything is
        # taken from the connection.
        peer = connect(ls)
        conn, _ = ls.accept()
        peer.sendall(b"abcdefgh")
        peer.close()
        rx = zcnet.Receiver(mode="copy")
        rx.add(conn)
        readonly = Fake(d.data_ptr(), (2, 0), (16,), flags=1)
        refused(lambda: rx.recv_into(readonly), ValueError, "read-only")
        refused(lambda: rx.recv_into(noncontig), ValueError, "not C-contiguous")
        # A host tensor without the buffer protocol (torch CPU) is filled through DLPack.
        host = ctypes.create_string_buffer(3)
        assert rx.recv_into(Fake(ctypes.addressof(host), (1, 0), (3,))) == 3
        assert host.raw == b"abc"
        assert rx.recv_into(d) == 5
        assert d.tobytes()[:5] == b"defgh"

        # A UDP sender sends a device buffer as one datagram: one larger than that is refused
        # before anything is copied or sent.
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.connect(("127.0.0.1", 9))
        utx = zcnet.Sender(u)
        refused(lambda: utx.send(zcnet.cuda_buffer(64001)), ValueError, "do not fit one datagram")
        del utx, tx, rx, d, noncontig, rocm, other_gpu, readonly
        gc.collect()
        print("ok")
        """,
        tmp_path,
        standin,
    )
    assert out.strip().endswith("ok"), out
    assert out.count("refused:") == 9, out


def test_readme_cuda_example_runs_against_the_standin(standin, tmp_path):
    """README.md's CUDA block, which skips itself without a GPU in test_docs, runs here with the
    stand-in as the driver and must not skip."""
    text = (REPO / "README.md").read_text()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.M | re.S) if "cuda_buffer" in b]
    assert len(blocks) == 1, "README.md should have one CUDA example"
    out, s = run_child(blocks[0], tmp_path, standin)
    assert "zcnet-doc-skip" not in out, out
    assert "'device_bytes': 8388608" in out, out
    assert int(s["async_dtoh"]) > 0, s


def need_torch_cuda():
    """Skips the calling test unless torch is installed and sees a GPU."""
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed: the torch.cuda test needs PyTorch and a GPU")
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda.is_available() is False: no GPU here (the stand-in tests cover the code paths)")


def test_torch_cuda_send_and_recv_into(tmp_path):
    """A torch.cuda tensor sent and received into, with the real CUDA driver (a GPU only)."""
    need_torch_cuda()
    out, _ = run_child(
        """
        import torch
        n = (8 << 20) + 5
        src = torch.arange(n, dtype=torch.int64, device="cuda").remainder(251).to(torch.uint8)
        want = bytes(src.cpu().numpy())
        ls = listener()
        peer = connect(ls)
        conn, _ = ls.accept()
        tx = zcnet.Sender(peer)
        def send():
            tx.send(src)
            tx.finish()
        t = threading.Thread(target=send, daemon=True)
        t.start()
        rx = zcnet.Receiver()
        rx.add(conn)
        dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
        assert rx.recv_into(dst) == n
        t.join(60)
        assert bytes(dst.cpu().numpy()) == want
        print("ok")
        """,
        tmp_path,
    )
    assert out.strip() == "ok", out


def test_receiver_into_gpu_memory_stages_where_no_nic_can_and_says_why(standin, tmp_path):
    """Receiver(mem="cuda:0") takes the best path into GPU memory: with no interface named,
    devmem and zcrx-dmabuf are not tried (said in stats()["gpu"]), so it stages: host buffers
    (kDLCPU) and recv_into a device buffer. The GPU memory made for the better paths is freed
    (the stand-in counts every allocation back)."""
    out, s = run_child(
        """
        total = (3 << 20) + 77
        conn, w = pattern_stream(total)
        rx = zcnet.Receiver(mem="cuda:0")
        g = rx.stats()["gpu"]
        assert g["device"] == "cuda:0" and g["path"] == "staging", g
        assert {r["path"] for r in g["refused"]} == {"devmem", "zcrx-dmabuf"}, g
        assert all("iface" in r["reason"] for r in g["refused"]), g
        rx.add(conn)
        first = next(iter(rx))
        assert first.__dlpack_device__() == (1, 0)
        head = first.tobytes()
        del first
        dst = zcnet.cuda_buffer(total)
        n = rx.recv_into(dst)
        assert rx.recv_into(dst) == 0
        w.join(60)
        assert head + dst.tobytes()[:n] == pattern(0, total)
        for bad in ("gpu:1x", "hugepage"):
            try:
                zcnet.Receiver(mem=bad)
                raise AssertionError(f"mem={bad!r} was taken")
            except ValueError as e:
                assert "cuda:N" in str(e) and "udmabuf" in str(e), e
        # A udmabuf is a NIC queue's memory (tests/test_nic_queue.py): not auto's.
        try:
            zcnet.Receiver(mem="udmabuf")
            raise AssertionError("mem='udmabuf' was taken by mode auto")
        except ValueError as e:
            assert 'mode="zcrx" or "devmem"' in str(e), e
        del rx, dst
        gc.collect()
        print("ok")
        """,
        tmp_path,
        standin,
    )
    assert out.strip() == "ok", out
    assert int(s["allocs"]) >= 2 and int(s["allocs"]) == int(s["frees"]), s


@pytest.mark.parametrize("mode", ["devmem", "zcrx", "auto"])
def test_receiver_into_gpu_memory_by_name_raises_the_kernels_refusal(standin, tmp_path, mode):
    """mode="devmem" or "zcrx" with mem="cuda:0" on an interface that cannot (lo) raises the
    kernel's refusal in one line, and leaves nothing behind: the GPU memory and its dma-buf are
    freed (the stand-in's leak summary), no binding stays. mode="auto" stages instead, with both
    refusals in stats()["gpu"]."""
    if os.geteuid() != 0:
        pytest.skip("binding a dma-buf to a queue needs root (CAP_NET_ADMIN)")
    out, s = run_child(
        f"""
        MODE = {mode!r}
"""
        + """
        try:
            rx = zcnet.Receiver(mode=MODE, iface="lo", mem="cuda:0", area=4 << 20)
            if MODE != "auto":
                raise AssertionError("lo took a dma-buf")
            g = rx.stats()["gpu"]
            assert g["path"] == "staging", g
            assert [r["path"] for r in g["refused"]] == ["devmem", "zcrx-dmabuf"], g
            assert all("not supported" in r["reason"] and "lo" in r["reason"] for r in g["refused"]), g
            del rx
        except zcnet.Error as e:
            msg = str(e)
            assert "\\n" not in msg.strip(), msg
            assert "lo" in msg, msg
            print("refused:", msg)
        gc.collect()
        print("ok")
        """,
        tmp_path,
        standin,
    )
    assert out.strip().endswith("ok"), out
    assert int(s["exports"]) >= 1, s
    assert s["leaked_dmabuf_fds"] == "0", s


def test_torch_cuda_receiver_with_gpu_memory(tmp_path):
    """Receiver(mem="cuda:0") with the real driver (a GPU only): the GPU memory for devmem and
    zcrx is allocated and freed, staging is taken (no interface named) and a torch.cuda tensor is
    filled by recv_into, checked byte for byte; devmem by name on lo raises one line (as root)."""
    need_torch_cuda()
    out, _ = run_child(
        """
        import os, torch
        n = (16 << 20) + 3
        conn, w = pattern_stream(n)
        rx = zcnet.Receiver(mem="cuda:0")
        g = rx.stats()["gpu"]
        assert g["path"] == "staging", g
        rx.add(conn)
        dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
        assert rx.recv_into(dst) == n
        w.join(60)
        assert bytes(dst.cpu().numpy()) == pattern(0, n)
        print("device_copies", rx.stats()["device_copies"])
        if os.geteuid() == 0:
            try:
                zcnet.Receiver(mode="devmem", iface="lo", mem="cuda:0", area=4 << 20)
                raise AssertionError("lo took a dma-buf")
            except zcnet.Error as e:
                assert "\\n" not in str(e).strip(), e
                print("devmem refused:", e)
        print("ok")
        """,
        tmp_path,
    )
    assert out.strip().endswith("ok"), out
    print(out)


def run_child_failing(fail, code, tmp_path, standin, monkeypatch):
    """Runs `code` in a child against the stand-in with its driver call `fail` refused; checks
    the child ended with "ok" and the stand-in injected the failure, and returns the output."""
    monkeypatch.setenv("ZCNET_STANDIN_FAIL", fail)
    out, s = run_child(code, tmp_path, standin)
    assert out.strip().endswith("ok"), out
    assert int(s["injected_failures"]) >= 1, s
    return out


@pytest.mark.parametrize("fail", ["cuStreamCreate", "cuEventCreate"])
def test_recv_into_device_when_the_driver_fails(standin, tmp_path, monkeypatch, fail):
    """The driver failing under recv_into's asynchronous copies (the stand-in injects it): no
    copy stream means the synchronous copies instead, said in stats() and the bytes still
    right; a copy whose event cannot be made raises zcnet.Error and leaves nothing pending or
    leaked (the stand-in's summary)."""
    run_child_failing(
        fail,
        f"""
        FAIL = {fail!r}
"""
        + """
        total = (2 << 20) + 5
        conn, w = pattern_stream(total)
        rx = zcnet.Receiver(mode="uring")
        rx.add(conn)
        dst = zcnet.cuda_buffer(total)
        if FAIL == "cuStreamCreate":
            assert rx.recv_into(dst) == total
            w.join(60)
            assert dst.tobytes() == pattern(0, total)
            dev = rx.stats()["device_copies"]
            assert dev["async_bytes"] == 0 and dev["sync_bytes"] == total, dev
            assert "copy stream" in dev["async_refused"], dev
        else:
            try:
                rx.recv_into(dst)
                raise AssertionError("a copy without its event went unnoticed")
            except zcnet.GpuError as e:
                # CUDA's failure has its own class, a kind of UnsupportedError.
                assert isinstance(e, zcnet.UnsupportedError), type(e)
                assert "cuEventCreate" in str(e), e
                print("raised:", e)
            w.join(60)
        del rx, dst
        gc.collect()
        print("ok")
        """,
        tmp_path,
        standin,
        monkeypatch,
    )


def test_a_device_send_the_driver_refuses_leaves_the_connection_to_host_sends(
    standin, tmp_path, monkeypatch
):
    """The staging pipeline cannot be made (the stand-in refuses cuStreamCreate): the device
    send raises zcnet.GpuError, and the sender is as it was: host sends before and after it
    arrive, in order, and finish() closes the stream cleanly."""
    run_child_failing(
        "cuStreamCreate",
        """
        ls = listener()
        reader = Reader(ls)
        tx = zcnet.Sender(connect(ls), mode="copy")
        assert tx.send(b"hello") == 5
        d = zcnet.cuda_buffer(1 << 20)
        try:
            tx.send(d)
            raise AssertionError("a pipeline without its stream went unnoticed")
        except zcnet.GpuError as e:
            assert "cuStreamCreate" in str(e), e
        assert tx.send(b" world") == 6
        st = tx.finish()
        assert reader.result() == b"hello world"
        assert st["bytes"] == 11, st
        del tx, d
        gc.collect()
        print("ok")
        """,
        tmp_path,
        standin,
        monkeypatch,
    )


def test_no_cuda_driver_is_a_gpu_error(tmp_path, monkeypatch):
    """Without a CUDA driver (ZCNET_LIBCUDA naming a file that does not exist), asking for
    device memory raises zcnet.GpuError, an UnsupportedError, in one line naming the fix."""
    monkeypatch.setenv("ZCNET_LIBCUDA", str(tmp_path / "no" / "libcuda.so.1"))
    out, _ = run_child(
        """
        try:
            zcnet.cuda_buffer(1 << 20)
            raise AssertionError("device memory without a driver")
        except zcnet.GpuError as e:
            assert isinstance(e, zcnet.UnsupportedError) and isinstance(e, zcnet.Error)
            msg = str(e)
            assert "\\n" not in msg and "driver" in msg, msg
        print("ok")
        """,
        tmp_path,
    )
    assert out.strip() == "ok", out
