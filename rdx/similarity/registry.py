"""The similarity-measure registry: every measure by a stable name, with its metadata.

``MEASURES`` maps a stable name to a :class:`Measure` (function + metadata):

==================== =================================================== ==========
name                 what                                                  higher is
                                                                           similar
==================== =================================================== ==========
cka_linear           debiased linear CKA (U-statistic HSIC)                yes
cka_linear_biased    biased linear CKA (Kornblith et al. 2019)             yes
cka_rbf              RBF CKA (sigma, sigma_mode, debiased)                 yes
rsa                  RSA (rdm: correlation|cosine|euclidean|              yes
                     mean_squared_euclidean, compare: spearman|pearson|
                     cosine|kendall_tau_a)
mutual_knn           mutual k-NN overlap (k)                               yes
cknna                CKNNA, Huh et al. 2024 (k)                            yes
jaccard_knn          Jaccard k-NN (k)                                      yes
procrustes           orthogonal Procrustes distance (kind)                 **no**
svcca                SVCCA, mean canonical correlation (keep, average)     yes
pwcca                projection-weighted CCA (Morcos et al. 2018)          yes
==================== =================================================== ==========

The conventions where the field has more than one: :data:`rdx.similarity.names.CONVENTIONS`
(and the similarity guide's table, which relates them to rsatoolbox, netrep and the other
reference packages).

Invariance tags (transformations of one input that leave the score unchanged, with the
default parameters): ``orthogonal`` (X → XQ, QᵀQ = I), ``isotropic_scaling`` (X → cX),
``translation`` (X → X + 1bᵀ), ``per_image_scaling`` (each row scaled by its own c_i > 0),
``per_image_shift`` (a constant added to all features of a row), ``feature_permutation``.

The measures are computed through :func:`rdx.similarity.calibration.similarity` and
:func:`rdx.similarity.calibration.calibrate` (with a permutation null and an interval);
what they cost: :mod:`rdx.similarity.resources`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RDXInputError
from . import cca as _cca
from . import cka as _cka
from . import cka_rbf as _cka_rbf
from . import neighbors as _nb
from . import procrustes as _proc
from .names import MEASURE_NAMES
from .rdm import rsa as _rsa_fn


@dataclass(frozen=True)
class Measure:
    """A registered similarity measure.

    Attributes
    ----------
    name : str
        Stable identifier (used by the CLI and in result files).
    fn : callable
        ``fn(X, Y, **params) -> float`` (torch scalars for torch inputs in the CKA case).
    higher_is_more_similar : bool
        False for distances (procrustes).
    symmetric : bool
        ``fn(X, Y) == fn(Y, X)``.
    invariances : tuple of str
        Invariance tags (module docstring) under the default parameters.
    params : dict
        Parameter names and their defaults.
    description : str
        One-line definition.
    """

    name: str
    fn: Callable[..., Any]
    higher_is_more_similar: bool
    symmetric: bool
    invariances: tuple[str, ...]
    params: dict[str, Any]
    description: str


_GLOBAL = ("orthogonal", "isotropic_scaling", "translation")
_COSINE = ("orthogonal", "isotropic_scaling", "per_image_scaling")

MEASURES: dict[str, Measure] = {m.name: m for m in (
    Measure("cka_linear", _cka.debiased_linear_cka, True, True, _GLOBAL, {},
            "Debiased linear CKA: U-statistic HSIC of the linear Grams XXᵀ, YYᵀ "
            "(feature-space form, O(n·d²))."),
    Measure("cka_linear_biased", _cka.biased_linear_cka, True, True, _GLOBAL, {},
            "Biased linear CKA ‖XcᵀYc‖²_F / (‖XcᵀXc‖_F‖YcᵀYc‖_F) (Kornblith et al. 2019)."),
    Measure("cka_rbf", _cka_rbf.rbf_cka, True, True, _GLOBAL,
            {"sigma": 1.0, "sigma_mode": "median_fraction", "debiased": True},
            "RBF-kernel CKA, σ = sigma·√(median squared distance) per representation "
            "(sigma_mode='median_fraction') or σ = sigma (sigma_mode='absolute'; not scale "
            "invariant); debiased HSIC by default."),
    Measure("rsa", _rsa_fn, True, True,
            ("isotropic_scaling", "per_image_scaling", "per_image_shift",
             "feature_permutation"),
            {"rdm": "correlation", "compare": "spearman"},
            "RSA: Spearman correlation (or Pearson, cosine, Kendall τ_a) of the upper "
            "triangles of the two RDMs (1 − Pearson r of image pairs by default; cosine, "
            "Euclidean d or rsatoolbox's d²/p). Invariances "
            "listed are for rdm='correlation'; 'euclidean' is orthogonal/translation/"
            "isotropic-scaling invariant, 'cosine' orthogonal/scaling invariant."),
    Measure("mutual_knn", _nb.mutual_knn, True, True, _COSINE, {"k": 10},
            "Mutual k-NN: mean over images of |N_k^X(i) ∩ N_k^Y(i)|/k, cosine neighbours, "
            "self excluded (Huh et al. 2024)."),
    Measure("cknna", _nb.cknna, True, True, _COSINE, {"k": 10},
            "CKNNA (Huh et al. 2024): CKA of the row-centred cosine kernels restricted to "
            "pairs that are k-NN in both representations."),
    Measure("jaccard_knn", _nb.jaccard_knn, True, True, _COSINE, {"k": 10},
            "Jaccard k-NN: mean over images of |N^X ∩ N^Y| / |N^X ∪ N^Y|, cosine "
            "neighbours, self excluded."),
    Measure("procrustes", _proc.procrustes_distance, False, True, _GLOBAL,
            {"kind": "squared"},
            "Orthogonal Procrustes distance 2 − 2‖X̄ᵀȲ‖_* of centred, unit-Frobenius-norm "
            "inputs (kind 'euclidean': its root; 'angular': arccos ‖X̄ᵀȲ‖_*). A distance."),
    Measure("svcca", _cca.svcca, True, True, _GLOBAL, {"keep": 0.99, "average": "min"},
            "SVCCA: keep the SVD directions explaining 99% of the variance of each input, "
            "then the mean canonical correlation (sum over min(r_X, r_Y); "
            "average='geometric': over √(r_X·r_Y), netrep's CCA)."),
    Measure("pwcca", _cca.pwcca, True, False,
            ("isotropic_scaling", "translation", "feature_permutation"), {},
            "PWCCA (Morcos et al. 2018): canonical correlations weighted by the absolute "
            "projections of the canonical variates onto the neurons of the input with fewer "
            "neurons."),
)}
# the command-line parsers read the names from .names (no torch import): keep them in step
if tuple(MEASURES) != MEASURE_NAMES:
    raise ImportError("rdx.similarity.names.MEASURE_NAMES must list the registry's measures "
                      f"in order: {tuple(MEASURES)}")


def resolve_measure(name: Any, params: dict[str, Any]) -> tuple[Measure, dict[str, Any]]:
    """The measure ``name`` and its parameters: the defaults updated with ``params`` (plain
    Python values); an unknown measure or parameter is refused, naming the valid ones."""
    if not isinstance(name, str) or name not in MEASURES:
        raise RDXInputError(f"unknown similarity measure {name!r}; use one of "
                            f"{', '.join(MEASURES)}.")
    m = MEASURES[name]
    unknown = sorted(set(params) - set(m.params))
    if unknown:
        takes = (f"its parameters are {', '.join(m.params)}" if m.params
                 else "it takes no parameters")
        raise RDXInputError(f"similarity measure {name!r} has no parameter(s) "
                            f"{', '.join(unknown)}; {takes}.")
    merged = {**m.params, **params}
    # plain Python types, so that the params can go straight into JSON
    return m, {k: (v.item() if isinstance(v, np.generic) else v) for k, v in merged.items()}
