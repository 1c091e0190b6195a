"""Helpers of the ZCNET NIXL backend tests: the wheel, the plugin folder, agents in processes.

Needs the stock wheel (`pip install --no-deps nixl-cu12==1.5.1 numpy`: the wheel's torch
requirement is for GPU tensors, which these tests do not use) and the plugin
(`cargo build -p zcnet-nixl`, or $ZCNET_NIXL_PLUGIN naming a libplugin_ZCNET.so)."""

import importlib
import os
import pathlib
import subprocess

import pytest

from nixl_procs import NIXL_VERSION, REPO, Worker, make_plugin_dir, wheel_plugins  # noqa: F401


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


@pytest.fixture(scope="session")
def nixl():
    return nixl_module()


@pytest.fixture(scope="session")
def plugin_dir(nixl, tmp_path_factory):
    """A folder with the wheel's plugins and ours, for NIXL_PLUGIN_DIR."""
    return make_plugin_dir(nixl, plugin_path(), tmp_path_factory.mktemp("nixl"))


def backend_env(backend, dev="lo"):
    """The environment of an agent of `backend`. NIXL's UCX backend is the reference, over TCP
    as ZCNET (UCX_TLS=tcp) and on the device the test means: without UCX_NET_DEVICES, UCX's
    TCP transport also listens on and connects to every other interface's address (eth0's,
    seen here), and the tests send only to loopback or to addresses of namespaces they made."""
    return {"UCX_TLS": "tcp", "UCX_NET_DEVICES": dev} if backend == "UCX" else None


def worker(plugin_dir, name, size, params=None, backend="ZCNET", **kw):
    """An agent of `backend` on loopback (tests/nixl_worker.py in a process of its own)."""
    return Worker(plugin_dir, name, size, params, backend=backend, env=backend_env(backend), **kw)


@pytest.fixture
def agents(plugin_dir):
    """Two agents, A and B, in two processes, each knowing the other's metadata; `make.one`
    makes a further agent, closed with them."""
    made = []

    def one(name, size, params=None, backend="ZCNET", **kw):
        w = worker(plugin_dir, name, size, params, backend, **kw)
        made.append(w)
        return w

    def make(size, params=None, backend="ZCNET"):
        a = one("A", size, params, backend)
        b = one("B", size, params, backend)
        assert a.call(cmd="add_remote", md=b.md)["name"] == "B"
        assert b.call(cmd="add_remote", md=a.md)["name"] == "A"
        return a, b

    make.one = one
    yield make
    for w in made:
        w.close()
