"""RDX: compare the learned representations of two vision models.

``RDX`` finds groups of images that one representation holds tightly together and the other
spreads apart (Representational Difference Explanations, NeurIPS 2025).

The package root imports nothing heavy: ``rdx.RDX`` and friends load torch and scikit-learn on
first access, so that ``rdx --help`` and light tools answer at once.

Importing it first chooses rdx's threading (:mod:`rdx.threads`): a passive OpenMP wait
policy unless the user set one, and a thread count from the CPUs this process may really
use (``RDX_NUM_THREADS`` overrides it). The OpenMP runtimes read the wait policy when they
load, so import rdx before torch. On AMD Zen 4 it also picks numpy's AVX2 kernels over its
slow AVX-512 sorts (:mod:`rdx.simd`), for the same reason before numpy loads.
"""
from __future__ import annotations

# first: the environment the OpenMP runtimes read must be set before torch or scikit-learn
# (and their runtimes) load
from . import simd as _simd
from . import threads as _threads

_threads.configure()
_simd.choose()   # numpy's AVX2 sorts on AMD Zen 4, set before numpy loads (rdx.simd)

import importlib  # noqa: E402
from typing import Any  # noqa: E402

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
    "features": "rdx.models.features_file",
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
