"""The ```python blocks of README.md and docs/*.md run as written (each in a fresh interpreter); a
block that needs what this machine lacks (a GPU) says so on a line starting "zcnet-doc-skip: " and
is reported as skipped with that reason."""

import re
import subprocess
import sys

import pytest

from conftest import REPO


def python_blocks():
    blocks = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = md.read_text()
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.M | re.S):
            line = text.count("\n", 0, m.start()) + 1
            blocks.append(pytest.param(m.group(1), id=f"{md.relative_to(REPO)}:{line}"))
    return blocks


BLOCKS = python_blocks()


def test_readme_has_a_python_example():
    assert any(p.id.startswith("README.md") for p in BLOCKS)


# A block that cannot run here (a GPU example without a GPU) prints this and the reason, and exits 0.
SKIP = "zcnet-doc-skip: "


@pytest.mark.parametrize("code", BLOCKS)
def test_python_block_runs(code):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    for line in r.stdout.splitlines():
        if line.startswith(SKIP):
            pytest.skip(line[len(SKIP) :])
