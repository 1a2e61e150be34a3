"""Representational similarity measures: how much two representations of the same images differ.

All measures take two ``n_images × d`` representations of the same images (widths may
differ; numpy arrays or torch tensors, CUDA tensors are computed on the GPU) and return a
scalar. The CKA functions return a differentiable float64 torch scalar for torch inputs and a
float for numpy inputs; every other measure returns a float.

* CKA (:mod:`.cka`): :func:`debiased_linear_cka`, :func:`biased_linear_cka` (feature-space
  form), :func:`rbf_cka` (absolute or median-fraction bandwidth, debiased or biased HSIC),
  :func:`kernel_cka` / :func:`hsic` on precomputed Gram matrices.
* RSA (:mod:`.rsa`): :func:`rsa` (correlation/cosine/Euclidean RDMs, Spearman/Pearson).
* Neighbourhoods (:mod:`.neighbors`): :func:`mutual_knn`, :func:`mutual_knn_per_image`,
  :func:`cknna`, :func:`jaccard_knn` (chunked top-k, never an n×n mask).
* :func:`procrustes_distance` (:mod:`.procrustes`) and :func:`svcca` (:mod:`.cca`).
* Registry (:mod:`.registry`): :data:`MEASURES` (function + metadata per stable name),
  :func:`similarity` (validate and dispatch) and :func:`calibrate` (permutation null →
  p-value and chance-corrected score; bootstrap → 95 % interval; seeded).
"""
from .cca import canonical_correlations, svcca
from .cka import (
    SIGMA_MODES,
    SIMCONS_RBF_PRESET,
    biased_linear_cka,
    debiased_linear_cka,
    hsic,
    kernel_cka,
    rbf_bandwidths,
    rbf_cka,
    rbf_kernel,
)
from .neighbors import cknna, jaccard_knn, mutual_knn, mutual_knn_per_image
from .procrustes import procrustes_distance
from .registry import MEASURES, Measure, calibrate, permutation_p_value, similarity
from .rsa import COMPARE_METHODS, RDM_METHODS, compute_rdm, rsa

__all__ = [
    "COMPARE_METHODS",
    "MEASURES",
    "RDM_METHODS",
    "SIGMA_MODES",
    "SIMCONS_RBF_PRESET",
    "Measure",
    "biased_linear_cka",
    "calibrate",
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
    "rbf_bandwidths",
    "rbf_cka",
    "rbf_kernel",
    "rsa",
    "similarity",
    "svcca",
]
