"""Concept-extraction baselines the paper compares RDX against (spec §2), plus SPEC.

Each is a scikit-learn-style estimator. Per-model ones (:class:`~.base.ConceptExtractor`)
are fit on one representation; pairwise ones (:class:`~.base.PairExplainer`) on both.
``BASELINES`` maps the config/CLI name to the class (imported on first use, so that
``import rdx`` does not pay for umap/numba).
"""
from __future__ import annotations

from importlib import import_module

from .base import ConceptExtractor, PairExplainer, top_images

#: method name → (module, class)
_REGISTRY = {
    "kmeans": ("kmeans", "KMeansConcepts"),
    "pca": ("factorization", "PCAConcepts"),
    "nmf": ("factorization", "NMFConcepts"),
    "cnmf": ("factorization", "ConvexNMFConcepts"),
    "sae": ("sae", "SAEConcepts"),
    "topk_sae": ("sae", "TopKSAEConcepts"),
    "usae": ("usae", "USAE"),
    "nlmcd": ("nlmcd", "NLMCD"),
    "spec": ("spec", "SPEC"),
}
BASELINE_NAMES = tuple(_REGISTRY)


def baseline_class(name: str) -> type:
    """The estimator class of a baseline, by its config name."""
    module, cls = _REGISTRY[name]
    return getattr(import_module(f".{module}", __name__), cls)


__all__ = ["BASELINE_NAMES", "ConceptExtractor", "PairExplainer", "baseline_class", "top_images"]
