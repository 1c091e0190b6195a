"""README's NIXL example runs as written, with the wheel installed and the plugin built, and
moves its bytes (crates/zcnet-py/tests/test_docs.py runs it too, and reports it skipped where
the wheel is missing; here it must run)."""

import os
import re
import subprocess
import sys

from conftest import REPO, plugin_path


def test_readme_nixl_example_runs(nixl):
    text = (REPO / "README.md").read_text()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.M | re.S) if "ZCNET" in b]
    assert len(blocks) == 1, "README should have one Python example of the ZCNET backend"
    env = dict(os.environ, ZCNET_NIXL_PLUGIN=str(plugin_path()))
    env.pop("NIXL_PLUGIN_DIR", None)
    r = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True,
                       env=env, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "zcnet-doc-skip" not in r.stdout, r.stdout
    assert "wrote 4194304 bytes through ZCNET, notification b'kv-block-0'" in r.stdout, r.stdout
