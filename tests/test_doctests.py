"""The Examples sections of the docstrings run as doctests.

Every module of the package whose source holds a ``>>>`` prompt is collected, so an
example added to a docstring is checked from then on without registering it here.
"""
from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rdx"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " in path.read_text(encoding="utf-8"):
            rel = path.relative_to(PACKAGE.parent).with_suffix("")
            names.append(".".join(p for p in rel.parts if p != "__init__"))
    return names


MODULES = _modules_with_examples()


def test_the_public_entry_points_have_examples():
    for name in ("rdx.method.estimator", "rdx.similarity.calibration", "rdx.evaluation.bsr"):
        assert name in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} holds '>>> ' but no doctest was found"
    assert result.failed == 0
