"""Concept-extraction baselines the paper compares RDX against, plus SPEC and crosscoders.

Each is a scikit-learn-style estimator. Per-model ones (:class:`~.base.ConceptExtractor`)
are fit on one representation; pairwise ones (:class:`~.base.PairExplainer`) on both.
``BASELINES`` maps the config/CLI name to the class (imported on first use, so that
``import rdx`` does not pay for umap/numba).
"""
from __future__ import annotations

from importlib import import_module

from ..lazy import lazy_exports

#: method name → (module, class, colour in every figure). Adding a baseline: its module and
#: one line here; the runner, ``rdx explain --method``, configs, figures and benchmarks read it.
_REGISTRY = {
    "kmeans": ("kmeans", "KMeansConcepts", "#0072B2"),
    "pca": ("factorization", "PCAConcepts", "#56B4E9"),
    "nmf": ("factorization", "NMFConcepts", "#009E73"),
    "cnmf": ("factorization", "ConvexNMFConcepts", "#66C2A5"),
    "sae": ("sae", "SAEConcepts", "#CC79A7"),
    "topk_sae": ("sae", "TopKSAEConcepts", "#8E4585"),
    "usae": ("usae", "USAE", "#E69F00"),
    "nlmcd": ("nlmcd", "NLMCD", "#8C564B"),
    "spec": ("spec", "SPEC", "#A89F00"),
    "crosscoder": ("crosscoder", "Crosscoder", "#332288"),
    "dfc_crosscoder": ("crosscoder", "DedicatedFeatureCrosscoder", "#5E4FA2"),
}
BASELINE_NAMES = tuple(_REGISTRY)
#: colour of each baseline in the figures (Okabe–Ito first: colour-blind safe)
BASELINE_COLORS = {name: entry[2] for name, entry in _REGISTRY.items()}


def baseline_class(name: str) -> type:
    """The estimator class of a baseline, by its config name."""
    module, cls, _ = _REGISTRY[name]
    return getattr(import_module(f".{module}", __name__), cls)


# the base classes import scikit-learn (~0.8 s): listing the names and colours
# (``rdx explain --help``, figures) must not pay for it
__getattr__ = lazy_exports(__name__, {"ConceptExtractor": ".base", "PairExplainer": ".base",
                                      "top_images": ".base"})


__all__ = ["BASELINE_COLORS", "BASELINE_NAMES", "ConceptExtractor", "PairExplainer", "baseline_class", "top_images"]
