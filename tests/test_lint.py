"""Static checks the suite runs: ruff (pyflakes' rules and syntax errors) and codespell.

Both read their settings from ``pyproject.toml`` (``[tool.ruff]``, ``[tool.codespell]``), so
``ruff check`` and ``codespell`` typed in the repository give the same answer as this test.
They are part of the ``test`` extra that ``setup.sh`` installs.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what is checked: the package, its tests, benchmarks, scripts and docs (code and prose)
TARGETS = ["rdx", "tests", "benchmarks", "scripts", "docs", "analyze_explanations.py"]


def _tool(name: str) -> str:
    """The tool installed next to this interpreter (the venv's), else one on PATH."""
    here = Path(sys.executable).with_name(name)
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: bash setup.sh installs the test extra "
                    f"(pip install -e '.[test]')")
    return found


def test_ruff_finds_nothing():
    proc = subprocess.run([_tool("ruff"), "check", "--no-cache", *TARGETS], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_codespell_finds_nothing():
    proc = subprocess.run([_tool("codespell"), *TARGETS, "README.md", "CHANGELOG.md", "configs"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_checks_can_fail(tmp_path):
    """The same settings flag an unused import and a misspelling (the checks are live)."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    bad = tmp_path / "bad.py"
    typo = "rec" + "ieve"   # spelt in two parts so that this file itself passes
    bad.write_text(f'import os\n"""{typo} the images"""\n')
    ruff = subprocess.run([_tool("ruff"), "check", "--no-cache", "bad.py"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert ruff.returncode == 1 and "F401" in ruff.stdout
    spell = subprocess.run([_tool("codespell"), "bad.py"], cwd=tmp_path, capture_output=True,
                           text=True)
    assert spell.returncode != 0 and typo in spell.stdout
