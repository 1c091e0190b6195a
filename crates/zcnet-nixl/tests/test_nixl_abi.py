"""The plugin's declarations of NIXL's ABI (cxx/nixl_abi.hpp) against the installed wheel.

NIXL_PLUGIN_API_VERSION stayed 1 while the backend class changed between releases, so the
loader cannot catch a mismatch: these tests do. They fail when
- the wheel is not the release the declarations were written for;
- the virtual functions of the wheel's own engines (its libplugin_OBJ.so and libplugin_POSIX.so,
  read from their vtables and symbol tables) differ from this plugin's in number, order, name or
  parameter types;
- the agent does not list ZCNET, or its name, parameters and memory kinds (returned by value as
  standard library containers) do not come through, or the backend cannot be created."""

import re
import shutil
import subprocess
import sys

import pytest

from conftest import NIXL_VERSION, plugin_path, wheel_plugins


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def need_binutils():
    for tool in ("readelf", "c++filt"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing (binutils): it reads the vtables")


def vtable_slots(so, vtable_name):
    """The demangled functions in the vtable named `vtable_name` (regex on the mangled symbol),
    without the offset-to-top and typeinfo words, and without namespace or class qualifiers:
    'registerMem(nixlBlobDesc const&, nixl_mem_t const&, nixlBackendMD*&)'."""
    funcs, vt = {}, None
    for line in run("readelf", "-sW", str(so)).splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":") or f[0] == "Num:":
            continue
        value, size, typ, name = int(f[1], 16), f[2], f[3], f[7]
        if typ == "FUNC" and value:
            funcs.setdefault(value, name)
        if typ == "OBJECT" and re.fullmatch(vtable_name, name):
            vt = (value, int(size, 0))
    assert vt, f"{so.name}: no vtable matching {vtable_name}"
    start, size = vt
    relocs = {}
    for line in run("readelf", "-rW", str(so)).splitlines():
        f = line.split()
        if len(f) < 3 or not re.fullmatch(r"[0-9a-f]{16}", f[0]):
            continue
        off = int(f[0], 16)
        if not start <= off < start + size:
            continue
        if f[2] == "R_X86_64_RELATIVE":
            relocs[off] = funcs.get(int(f[3], 16), f"?{f[3]}")
        elif f[2] == "R_X86_64_64":
            relocs[off] = f[4]
    mangled = [relocs.get(o, "?") for o in range(start + 16, start + size, 8)]
    out = run("c++filt", *mangled).splitlines()
    slots = []
    for d in out:
        d = d.replace("zcnet_nixl::(anonymous namespace)::", "").replace("zcnet_nixl::", "")
        # Drop the class: "nixlObjEngine::supportsRemote() const" -> "supportsRemote() const".
        m = re.match(r"^[A-Za-z_][A-Za-z0-9_]*::(~?[A-Za-z_][A-Za-z0-9_]*\(.*)$", d)
        d = m.group(1) if m else d
        slots.append("~destructor" if d.startswith("~") else d)
    return slots


def test_wheel_is_the_release_the_declarations_are_for(nixl):
    from importlib.metadata import version

    v = version("nixl-cu12")
    assert v == NIXL_VERSION, (
        f"nixl-cu12 {v} is installed; cxx/nixl_abi.hpp declares NIXL {NIXL_VERSION}'s backend ABI "
        "(the plugin API version does not change when the class does): check the declarations "
        "against this release, then update NIXL_VERSION"
    )


@pytest.mark.parametrize("wheel_plugin,engine", [("OBJ", "nixlObjEngine"), ("POSIX", "nixlPosixEngine")])
def test_vtable_matches_the_wheels_engines(nixl, wheel_plugin, engine):
    need_binutils()
    theirs = vtable_slots(
        wheel_plugins(nixl) / f"libplugin_{wheel_plugin}.so", f"_ZTV{len(engine)}{engine}"
    )
    ours = vtable_slots(plugin_path(), r"_ZTVN10zcnet_nixl.*11ZcnetEngineE")
    assert len(theirs) == 27, theirs  # 2 destructors + 25 virtual functions in 1.4.0 .. 1.5.1
    assert ours == theirs, "\n".join(
        f"slot {i}: ours {o!r} vs the wheel's {t!r}"
        for i, (o, t) in enumerate(zip(ours, theirs))
        if o != t
    ) or f"{len(ours)} slots vs {len(theirs)}"


def test_agent_lists_the_plugin_and_creates_the_backend(plugin_dir):
    """In a fresh process: the agent finds libplugin_ZCNET.so in NIXL_PLUGIN_DIR, takes its
    name, parameters and memory kinds, and creates the backend with parameters; the wheel's UCX
    backend is created from the same folder too."""
    code = """
import json
from nixl_cu12 import nixl_agent, nixl_agent_config
a = nixl_agent("abi", nixl_agent_config(backends=[]))
out = {"plugins": a.get_plugin_list(), "params": a.get_plugin_params("ZCNET"),
       "mems": a.get_plugin_mem_types("ZCNET")}
a.create_backend("ZCNET", {"ip_addr": "127.0.0.1", "port": "0"})
out["backend_params"] = a.get_backend_params("ZCNET")
a.create_backend("UCX", {})  # the wheel's own plugins still work from this folder
print("ABI " + json.dumps(out), flush=True)
# The wheel's UCX backend crashes the process at exit (SIGSEGV, with or without ZCNET and
# NIXL_PLUGIN_DIR, on this CPU-only machine): leave without running exit handlers.
import os
os._exit(0)
"""
    env = {"NIXL_PLUGIN_DIR": str(plugin_dir)}
    import os

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, **env), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("ABI ")]
    assert line, r.stdout + r.stderr
    import json

    out = json.loads(line[0][4:])
    assert "ZCNET" in out["plugins"], out
    # The wheel's own plugins still load beside ours.
    assert "UCX" in out["plugins"] and "POSIX" in out["plugins"], out
    assert out["params"] == {"ip_addr": "127.0.0.1", "port": "0", "tx": "auto", "streams": "1"}, out
    assert out["mems"] == ["DRAM_SEG", "VRAM_SEG"], out
    # The parameters the backend was created with (NIXL keeps them as given).
    assert out["backend_params"] == {"ip_addr": "127.0.0.1", "port": "0"}, out


@pytest.mark.parametrize(
    "params,message",
    [
        ({"port": "not-a-port"}, "port=not-a-port is not a port number"),
        ({"tx": "msg-zerocopy"}, "tx=msg-zerocopy is not one of auto, copy, uring, uring-zc"),
        ({"ip_addr": "not-an-ip"}, "ip_addr \"not-an-ip\" is not a numeric IP address"),
        ({"streams": "0"}, "streams=0 is not a whole number from 1 to 16"),
        ({"streams": "17"}, "streams=17 is not a whole number from 1 to 16"),
        ({"streams": "two"}, "streams=two is not a whole number from 1 to 16"),
    ],
)
def test_a_bad_parameter_fails_creation_cleanly(plugin_dir, params, message):
    code = f"""
from nixl_cu12 import nixl_agent, nixl_agent_config
a = nixl_agent("abi", nixl_agent_config(backends=[]))
try:
    a.create_backend("ZCNET", {params!r})
except Exception as e:
    print("REFUSED", type(e).__name__)
"""
    import os

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, NIXL_PLUGIN_DIR=str(plugin_dir)), timeout=60)
    assert r.returncode == 0 and "REFUSED" in r.stdout, r.stdout + r.stderr
    assert message in r.stderr, r.stderr


TELEMETRY = """
import ctypes, os, tempfile, time
from nixl_cu12 import nixl_agent, nixl_agent_config
agents, bufs = [], []
for name in ("ta", "tb"):
    ag = nixl_agent(name, nixl_agent_config(backends=[], capture_telemetry=True))
    ag.create_backend("ZCNET", {})
    buf = ctypes.create_string_buffer(1 << 20)
    ag.register_memory([(ctypes.addressof(buf), 1 << 20, 0, "")], "DRAM")
    agents.append(ag)
    bufs.append(buf)
a, b = agents
a.add_remote_agent(b.get_agent_metadata())
for i in range(3):
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(ctypes.addressof(bufs[0]), 1 << 20, 0)], "DRAM"),
                          a.get_xfer_descs([(ctypes.addressof(bufs[1]), 1 << 20, 0)], "DRAM"), "tb")
    s = a.transfer(h)
    while s == "PROC":
        time.sleep(0.001)
        s = a.check_xfer_state(h)
    assert s == "DONE", s
    a.get_xfer_telemetry(h)
    a.release_xfer_handle(h)
    time.sleep(0.6)
print("TELEMETRY OK", sorted(os.listdir(os.environ["NIXL_TELEMETRY_DIR"])))
"""


def test_agent_telemetry_reads_the_engine(plugin_dir, tmp_path):
    """Agents with telemetry on (NIXL's per-transfer telemetry and its files) use the ZCNET
    backend as any other: transfers complete, the telemetry files appear, nothing crashes."""
    import os

    env = dict(os.environ, NIXL_PLUGIN_DIR=str(plugin_dir), NIXL_TELEMETRY_ENABLE="y",
               NIXL_TELEMETRY_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", TELEMETRY], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "TELEMETRY OK ['ta', 'tb']" in r.stdout, r.stdout + r.stderr
