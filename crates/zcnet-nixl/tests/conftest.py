"""Helpers of the ZCNET NIXL backend tests: the wheel, the plugin folder, agents in processes.

Needs the stock wheel (`pip install --no-deps nixl-cu12==1.5.1 numpy`: the wheel's torch
requirement is for GPU tensors, which these tests do not use) and the plugin
(`cargo build -p zcnet-nixl`, or $ZCNET_NIXL_PLUGIN naming a libplugin_ZCNET.so)."""

import importlib
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
HERE = pathlib.Path(__file__).resolve().parent
# The NIXL release the plugin's declarations (cxx/nixl_abi.hpp) were written and checked for.
NIXL_VERSION = "1.5.1"
# The prefix of nixl_worker.py's replies (NIXL logs to stdout too).
TAG = "zcnet-nixl-reply "


def nixl_module():
    try:
        return importlib.import_module("nixl_cu12")
    except ImportError as e:
        pytest.skip(
            f"the NIXL wheel is not installed ({e}): pip install --no-deps nixl-cu12=={NIXL_VERSION}"
        )


def plugin_path():
    """libplugin_ZCNET.so: $ZCNET_NIXL_PLUGIN, else the workspace's build (built now if missing)."""
    env = os.environ.get("ZCNET_NIXL_PLUGIN")
    if env:
        return pathlib.Path(env)
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "libplugin_ZCNET.so"
        if p.is_file():
            return p
    r = subprocess.run(["cargo", "build", "-p", "zcnet-nixl"], cwd=REPO)
    p = REPO / "target" / "debug" / "libplugin_ZCNET.so"
    if r.returncode != 0 or not p.is_file():
        pytest.fail("cargo build -p zcnet-nixl did not produce target/debug/libplugin_ZCNET.so")
    return p


def wheel_plugins(mod):
    """The wheel's own plugin folder (NIXL_PLUGIN_DIR replaces it, so tests link its plugins)."""
    site = pathlib.Path(mod.__file__).resolve().parent.parent
    d = site / ".nixl_cu12.mesonpy.libs" / "plugins"
    if not d.is_dir():
        pytest.fail(f"the wheel's plugin folder is not where 1.5.1 has it: {d}")
    return d


@pytest.fixture(scope="session")
def nixl():
    return nixl_module()


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


@pytest.fixture(scope="session")
def plugin_dir(nixl, tmp_path_factory):
    """A folder with the wheel's plugins and ours, for NIXL_PLUGIN_DIR."""
    return make_plugin_dir(nixl, plugin_path(), tmp_path_factory.mktemp("nixl"))


class Worker:
    """An agent in a process of its own (tests/nixl_worker.py)."""

    def __init__(self, plugin_dir, name, size, params=None, backend="ZCNET", env=None):
        env = dict(os.environ, NIXL_PLUGIN_DIR=str(plugin_dir), **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "nixl_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.name = name
        r = self.call(cmd="init", name=name, size=size, params=params or {}, backend=backend)
        self.md, self.addr, self.plugins = r["md"], r["addr"], r["plugins"]

    def call(self, timeout=120, **cmd):
        # A command that hangs (a transfer that never completes, a destructor that never
        # returns) is killed, and fails the test, after `timeout` seconds.
        watchdog = threading.Timer(timeout, self.proc.kill)
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
        """Deregisters, destroys the agent (and so the engine) and exits; fails if that hangs."""
        if self.proc.poll() is None:
            try:
                self.call(cmd="quit", timeout=60)
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()


@pytest.fixture
def agents(plugin_dir):
    """Two agents, A and B, in two processes, each knowing the other's metadata."""
    made = []

    def make(size, params=None, backend="ZCNET"):
        # NIXL's UCX backend is the reference, over TCP as ZCNET (UCX_TLS=tcp).
        env = {"UCX_TLS": "tcp"} if backend == "UCX" else None
        a = Worker(plugin_dir, "A", size, params, backend=backend, env=env)
        made.append(a)
        b = Worker(plugin_dir, "B", size, params, backend=backend, env=env)
        made.append(b)
        assert a.call(cmd="add_remote", md=b.md)["name"] == "B"
        assert b.call(cmd="add_remote", md=a.md)["name"] == "A"
        return a, b

    yield make
    for w in made:
        w.close()
