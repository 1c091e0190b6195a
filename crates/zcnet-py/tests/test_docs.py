"""The ```python blocks of README.md and docs/*.md run as written (each in a fresh interpreter); a
block that needs what this machine lacks (a GPU) says so on a line starting "zcnet-doc-skip: " and
is reported as skipped with that reason."""

import ast
import re
import subprocess
import sys
import tomllib

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


def test_readme_examples_import_only_what_its_install_line_brings():
    """A newcomer runs README's `pip install` line in a fresh venv, then its examples: every module
    they import must be the standard library's, zcnet, or brought by that line (its extras, looked
    up in pyproject.toml, or a package it names)."""
    readme = (REPO / "README.md").read_text()
    lines = [l for l in re.findall(r"^pip install (.+)$", readme, re.M) if "crates/zcnet-py" in l]
    assert lines, "README has no 'pip install ./crates/zcnet-py' line"
    optional = tomllib.loads((REPO / "crates/zcnet-py/pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    brought = {"zcnet"}
    for arg in lines[0].replace("'", "").split():
        m = re.match(r".*crates/zcnet-py\[(.*)\]$", arg)
        if m:
            for extra in m.group(1).split(","):
                brought |= {re.split(r"[<>=!~ ]", d)[0] for d in optional[extra.strip()]}
        elif not arg.startswith("-") and "/" not in arg:
            brought.add(arg)
    blocks = re.findall(r"^```python\n(.*?)^```", readme, re.M | re.S)
    for code in blocks:
        for node in ast.walk(ast.parse(code)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                assert top in sys.stdlib_module_names or top in brought, (
                    f"README imports {top}, which '{'pip install ' + lines[0]}' does not bring"
                )
