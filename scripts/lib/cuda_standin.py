"""zcnet's CUDA driver stand-in (crates/zcnet-sys/tests/cuda-standin/standin.c) built for Python
tests, with the flags zcnet-testkit's cuda_standin::build uses: a fake libcuda.so.1 for machines
without a GPU, loaded through ZCNET_LIBCUDA. NOT a GPU: what runs against it checks bytes and the
driver's contract (device memory the CPU cannot touch, copies that complete late, nothing
leaked: a process that leaked exits with LEAK_EXIT), never speed.

    lib, why = build(tmp_dir)       # tmp_dir/libcuda.so.1, or None and why (no `cc`)
    lib = for_pytest(tmp_path_factory)  # in a fixture: built once, the test skipped without `cc`
"""

import os
import pathlib
import shutil
import subprocess

SOURCE = pathlib.Path(__file__).resolve().parents[2] / "crates" / "zcnet-sys" / "tests" / "cuda-standin" / "standin.c"
# zcnet_testkit::cuda_standin::LEAK_EXIT: the stand-in's exit status for a process that leaked.
LEAK_EXIT = 86
FLAGS = ["-shared", "-fPIC", "-O2", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror"]


def build(out_dir):
    """Compiles the stand-in into `out_dir`/libcuda.so.1; returns (path, None), or (None, why)
    when there is no C compiler. A compiler that fails raises (a broken source is a failure)."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        return None, f"needs `{cc}` (or $CC) to build the CUDA driver stand-in"
    out = pathlib.Path(out_dir) / "libcuda.so.1"
    r = subprocess.run([cc, *FLAGS, "-o", str(out), str(SOURCE), "-lpthread"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"building the CUDA stand-in failed:\n{r.stderr}")
    return out, None


def for_pytest(tmp_path_factory):
    """The stand-in for a pytest fixture: built under the session's temporary folder; skips the
    test (with the reason) where there is no C compiler."""
    import pytest

    lib, why = build(tmp_path_factory.mktemp("cuda-standin"))
    if lib is None:
        pytest.skip(why)
    return lib


def summary(path):
    """The counters the stand-in wrote at exit to ZCNET_STANDIN_SUMMARY=`path`, as a dict."""
    text = pathlib.Path(path).read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
