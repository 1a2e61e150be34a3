"""RDX: compare the learned representations of two vision models.

``RDX`` finds groups of images that one representation holds tightly together and the other
spreads apart (Representational Difference Explanations, NeurIPS 2025).

The package root imports nothing heavy: ``rdx.RDX`` and friends load torch and scikit-learn on
first access, so that ``rdx --help`` and light tools answer at once.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

#: public name → module that defines it (imported on first access)
_LAZY = {
    "RDX": "rdx.method.estimator",
    "Explanation": "rdx.results.types",
    "DirectionResult": "rdx.results.types",
    "MethodResult": "rdx.results.types",
    "RDXInputError": "rdx.errors",
    "NotFittedError": "rdx.errors",
    "bsr_scores": "rdx.evaluation.bsr",
    "score": "rdx.evaluation.scoring",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rdx' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
