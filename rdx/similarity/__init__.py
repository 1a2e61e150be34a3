"""Representational similarity measures: how much two representations of the same images differ.

All measures take two ``n_images × d`` representations of the same images (widths may
differ; numpy arrays or torch tensors, CUDA tensors are computed on the GPU) and return a
scalar. The CKA functions return a differentiable float64 torch scalar for torch inputs and a
float for numpy inputs; every other measure returns a float.

* CKA: :func:`debiased_linear_cka`, :func:`biased_linear_cka` (:mod:`.cka`, feature-space
  form), :func:`rbf_cka` (:mod:`.cka_rbf`; absolute or median-fraction bandwidth, debiased or
  biased HSIC), :func:`kernel_cka` / :func:`hsic` on precomputed Gram matrices
  (:mod:`.cka_kernel`).
* RSA (:mod:`.rdm`): :func:`rsa` (correlation/cosine/Euclidean RDMs; Spearman, Pearson,
  cosine or Kendall τ_a comparison).
* Neighbourhoods (:mod:`.neighbors`): :func:`mutual_knn`, :func:`mutual_knn_per_image`,
  :func:`cknna`, :func:`jaccard_knn` (chunked top-k, never an n×n mask).
* :func:`procrustes_distance` (:mod:`.procrustes`), :func:`svcca` and :func:`pwcca`
  (:mod:`.cca`).
* Registry (:mod:`.registry`): :data:`MEASURES` (function + metadata per stable name);
  :func:`similarity` (validate and dispatch) and :func:`calibrate` (permutation null →
  p-value, chance-corrected and calibrated scores; bootstrap → 95 % interval; seeded) and
  :func:`calibrate_layers` (layer × layer, one shared permutation per null draw) in
  :mod:`.calibration`; what a measure costs in :mod:`.resources`.
"""
from __future__ import annotations

from ..lazy import lazy_exports
from .names import COMPARE_METHODS, RDM_METHODS, SIGMA_MODES

# the measures (torch) load on first use: the command-line parsers need only the names
__getattr__ = lazy_exports(__name__, {
    "canonical_correlations": ".cca", "pwcca": ".cca", "svcca": ".cca",
    "biased_linear_cka": ".cka", "debiased_linear_cka": ".cka",
    "SIMCONS_RBF_PRESET": ".cka_rbf", "rbf_bandwidths": ".cka_rbf", "rbf_cka": ".cka_rbf",
    "rbf_kernel": ".cka_rbf",
    "hsic": ".cka_kernel", "kernel_cka": ".cka_kernel",
    "cknna": ".neighbors", "jaccard_knn": ".neighbors", "mutual_knn": ".neighbors",
    "mutual_knn_per_image": ".neighbors",
    "procrustes_distance": ".procrustes",
    "MEASURES": ".registry", "Measure": ".registry",
    "calibrate": ".calibration", "calibrate_layers": ".calibration",
    "calibrated_score": ".calibration", "permutation_p_value": ".calibration",
    "similarity": ".calibration",
    "compute_rdm": ".rdm", "rsa": ".rdm",
})

__all__ = [
    "COMPARE_METHODS",
    "MEASURES",
    "RDM_METHODS",
    "SIGMA_MODES",
    "SIMCONS_RBF_PRESET",
    "Measure",
    "biased_linear_cka",
    "calibrate",
    "calibrate_layers",
    "calibrated_score",
    "canonical_correlations",
    "cknna",
    "compute_rdm",
    "debiased_linear_cka",
    "hsic",
    "jaccard_knn",
    "kernel_cka",
    "mutual_knn",
    "mutual_knn_per_image",
    "permutation_p_value",
    "procrustes_distance",
    "pwcca",
    "rbf_bandwidths",
    "rbf_cka",
    "rbf_kernel",
    "rsa",
    "similarity",
    "svcca",
]
