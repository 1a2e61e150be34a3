"""Linear CKA in feature space (no n×n Gram matrices).

Debiased CKA (Kornblith et al. 2019; Nguyen et al. 2021) uses the U-statistic HSIC
(Song et al. 2012) of the linear Grams ``K = XXᵀ``, ``L = YYᵀ`` with zeroed diagonals::

    HSIC_u(K, L) = [tr(K̃L̃) + (1ᵀK̃1)(1ᵀL̃1)/((n−1)(n−2)) − 2/(n−2)·1ᵀK̃L̃1] / (n(n−3))

Each term is written with feature-space products, O(n·d²) instead of O(n²·d):

* ``tr(K̃L̃) = ‖XᵀY‖²_F − Σᵢ |xᵢ|²|yᵢ|²``
* ``1ᵀK̃1 = |Xᵀ1|² − Σᵢ |xᵢ|²``
* ``1ᵀK̃L̃1 = (K̃1)·(L̃1)`` with ``K̃1 = X(Xᵀ1) − (|xᵢ|²)ᵢ``

Inputs are column-centred first (HSIC_u is translation invariant; centring only improves
accuracy) and everything is accumulated in float64. Torch inputs keep the autograd graph.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError


def _as_pair(X: Any, Y: Any, *, min_n: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Both inputs as float64 tensors on a common device; True if the caller gave numpy."""
    numpy_in = not (isinstance(X, torch.Tensor) or isinstance(Y, torch.Tensor))
    out = []
    for name, Z in (("X", X), ("Y", Y)):
        if not isinstance(Z, torch.Tensor):
            arr = np.asarray(Z)
            if arr.dtype.kind not in "biuf":
                raise RDXInputError(f"CKA input {name} has dtype {arr.dtype}; expected real numbers.")
            Z = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64))
        if Z.ndim != 2:
            raise RDXInputError(f"CKA input {name} has shape {tuple(Z.shape)}; expected a 2-D "
                                "n_images × n_features array.")
        if Z.is_complex() or not (Z.is_floating_point() or Z.dtype in
                                  (torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.uint8, torch.bool)):
            raise RDXInputError(f"CKA input {name} has dtype {Z.dtype}; expected real numbers.")
        out.append(Z)
    X, Y = out
    if X.shape[0] != Y.shape[0]:
        raise RDXInputError(f"CKA inputs have different numbers of images ({X.shape[0]} vs "
                            f"{Y.shape[0]}); rows must be the same images in both.")
    n = X.shape[0]
    if n < min_n:
        raise RDXInputError(f"CKA needs at least {min_n} images, got n={n}"
                            + (" (the debiased HSIC estimator divides by n(n−3))."
                               if min_n == 4 else "."))
    device = X.device if isinstance(X, torch.Tensor) and X.device.type != "cpu" else Y.device
    X = X.to(device=device, dtype=torch.float64)
    Y = Y.to(device=device, dtype=torch.float64)
    with torch.no_grad():
        for name, Z in (("X", X), ("Y", Y)):
            if not bool(torch.isfinite(Z).all()):
                raise RDXInputError(f"CKA input {name} contains NaN/inf values.")
            if Z.shape[1] == 0 or bool((Z == Z[:1]).all()):
                raise RDXInputError(
                    f"CKA input {name} is constant (all {n} images have the same features), "
                    "so its kernel has zero variance and CKA is undefined.")
    return X, Y, numpy_in


def _center(Z: torch.Tensor) -> torch.Tensor:
    return Z - Z.mean(dim=0, keepdim=True)


def _hsic_u_terms(X: torch.Tensor, Y: torch.Tensor, XtY: torch.Tensor,
                  nx: torch.Tensor, ny: torch.Tensor, sx: torch.Tensor,
                  sy: torch.Tensor) -> torch.Tensor:
    """HSIC_u(K, L) · n(n−3) from precomputed pieces (see the module docstring)."""
    n = X.shape[0]
    tr = (XtY * XtY).sum() - (nx * ny).sum()
    one_k = (sx * sx).sum() - nx.sum()
    one_l = (sy * sy).sum() - ny.sum()
    kone = X @ sx - nx
    lone = Y @ sy - ny
    return tr + one_k * one_l / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (kone * lone).sum()


def debiased_linear_cka(X: Any, Y: Any) -> Any:
    """Debiased linear CKA of ``X`` (n×p) and ``Y`` (n×q) in O(n·(p²+q²+pq)).

    Returns a float64 torch scalar (differentiable) for torch inputs, a float for numpy
    inputs. Raises :class:`RDXInputError` for n < 4, a constant input, or when the debiased
    self-similarity of an input is not positive (degenerate, e.g. tiny n).
    """
    X, Y, numpy_in = _as_pair(X, Y, min_n=4)
    X, Y = _center(X), _center(Y)
    nx = (X * X).sum(dim=1)
    ny = (Y * Y).sum(dim=1)
    sx, sy = X.sum(dim=0), Y.sum(dim=0)
    hxy = _hsic_u_terms(X, Y, X.T @ Y, nx, ny, sx, sy)
    hxx = _hsic_u_terms(X, X, X.T @ X, nx, nx, sx, sx)
    hyy = _hsic_u_terms(Y, Y, Y.T @ Y, ny, ny, sy, sy)
    # the common factor 1/(n(n−3)) cancels in the ratio
    with torch.no_grad():
        if not (float(hxx) > 0 and float(hyy) > 0):
            raise RDXInputError(
                "debiased CKA is undefined for these inputs: the unbiased HSIC estimate of "
                f"an input with itself is not positive (HSIC_u(X,X)·n(n−3)={float(hxx):.3g}, "
                f"HSIC_u(Y,Y)·n(n−3)={float(hyy):.3g}); use more images.")
    cka = hxy / torch.sqrt(hxx * hyy)
    return float(cka) if numpy_in else cka


def biased_linear_cka(X: Any, Y: Any) -> Any:
    """Plain linear CKA: ``‖XcᵀYc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F)`` with column-centred inputs.

    Returns a float64 torch scalar for torch inputs, a float for numpy inputs.
    """
    X, Y, numpy_in = _as_pair(X, Y, min_n=2)
    X, Y = _center(X), _center(Y)
    num = ((X.T @ Y) ** 2).sum()
    den = torch.sqrt(((X.T @ X) ** 2).sum() * ((Y.T @ Y) ** 2).sum())
    cka = num / den
    return float(cka) if numpy_in else cka
