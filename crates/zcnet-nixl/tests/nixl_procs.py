"""Agents of the stock NIXL wheel in processes of their own (nixl_worker.py) and the plugin folder
they load the ZCNET backend from: shared by the tests (conftest.py) and scripts/nixl-bench.py."""

import json
import os
import pathlib
import subprocess
import sys
import threading

REPO = pathlib.Path(__file__).resolve().parents[3]
HERE = pathlib.Path(__file__).resolve().parent
# The NIXL release the plugin's declarations (cxx/nixl_abi.hpp) were written and checked for.
NIXL_VERSION = "1.5.1"
# The prefix of nixl_worker.py's replies (NIXL logs to stdout too).
TAG = "zcnet-nixl-reply "


def wheel_plugins(mod):
    """The wheel's own plugin folder (NIXL_PLUGIN_DIR replaces it, so tests link its plugins)."""
    site = pathlib.Path(mod.__file__).resolve().parent.parent
    d = site / ".nixl_cu12.mesonpy.libs" / "plugins"
    if not d.is_dir():
        raise RuntimeError(f"the wheel's plugin folder is not where {NIXL_VERSION} has it: {d}")
    return d


def make_plugin_dir(mod, plugin, root):
    """NIXL_PLUGIN_DIR for the wheel's plugins and ours, under `root`; returns the folder.

    The wheel's plugins find their libraries through RPATH `$ORIGIN/..` and
    `$ORIGIN/../../nixl_cu12.libs`, and `$ORIGIN` is the folder they are opened from (links are
    not followed), so the folder sits in a copy of the wheel's layout made of links."""
    site = pathlib.Path(mod.__file__).resolve().parent.parent
    libs = site / ".nixl_cu12.mesonpy.libs"
    wheel_plugins(mod)
    (root / "nixl_cu12.libs").symlink_to(site / "nixl_cu12.libs")
    (root / libs.name).mkdir()
    for p in libs.iterdir():
        if p.name != "plugins":
            (root / libs.name / p.name).symlink_to(p)
    d = root / libs.name / "plugins"
    d.mkdir()
    for p in (libs / "plugins").iterdir():
        (d / p.name).symlink_to(p)
    (d / "libplugin_ZCNET.so").symlink_to(pathlib.Path(plugin).resolve())
    return d


class Worker:
    """An agent in a process of its own (tests/nixl_worker.py)."""

    def __init__(self, plugin_dir, name, size, params=None, backend="ZCNET", env=None, prefix=(),
                 vram=0):
        # `prefix`: what the process runs under (["ip", "netns", "exec", NS] for a namespace);
        # `vram`: bytes of device memory registered as VRAM too (needs ZCNET_LIBCUDA in `env`).
        env = dict(os.environ, NIXL_PLUGIN_DIR=str(plugin_dir), **(env or {}))
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, str(HERE / "nixl_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.name = name
        try:
            r = self.call(cmd="init", name=name, size=size, params=params or {},
                          backend=backend, vram=vram)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            raise
        self.md, self.addr, self.vaddr, self.plugins = r["md"], r["addr"], r["vaddr"], r["plugins"]

    def call(self, timeout=120, **cmd):
        # `timeout` is the command's own deadline in the worker (a transfer's wait, a wait for
        # notifications), which then answers with what it has; a command that hangs anyway (a
        # destructor that never returns) is killed, and fails the test, 15 s after it.
        cmd["timeout"] = timeout
        watchdog = threading.Timer(timeout + 15, self.proc.kill)
        watchdog.start()
        try:
            return self._call(cmd)
        finally:
            watchdog.cancel()

    def _call(self, cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                rc = self.proc.wait(timeout=10)
                raise AssertionError(f"agent {self.name} exited (status {rc}) during {cmd['cmd']}")
            if line.startswith(TAG):
                break
            sys.stderr.write(f"[{self.name}] {line}")  # NIXL's log, shown when a test fails
        r = json.loads(line[len(TAG) :])
        if "error" in r:
            raise AssertionError(f"agent {self.name}: {cmd['cmd']}: {r['error']}")
        return r

    def close(self):
        """Deregisters, destroys the agent (and so the engine) and exits; fails if that hangs or
        the process then exits with an error (the CUDA stand-in's 86: something leaked)."""
        if self.proc.poll() is None:
            try:
                self.call(cmd="quit", timeout=60)
                self.proc.stdin.close()
                rc = self.proc.wait(timeout=30)
                if rc != 0:
                    raise AssertionError(f"agent {self.name} exited with status {rc} after quit")
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
