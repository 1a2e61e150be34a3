"""Orthogonal Procrustes distance between two representations.

Both inputs are column-centred and scaled to unit Frobenius norm (``X̄ = Xc/‖Xc‖_F``); the
narrower one is implicitly zero-padded to the wider width. The orthogonal Procrustes
problem ``min_{QᵀQ=I} ‖X̄ − ȲQ‖²_F`` has the closed-form value

    d²(X, Y) = 2 − 2‖X̄ᵀȲ‖_*        (‖·‖_* = nuclear norm, sum of singular values)

(Schönemann 1966; as used for representations by Ding et al. 2021 and Williams et al. 2021).
``kind`` selects the reported form:

* ``"squared"`` (default): d² ∈ [0, 2];
* ``"euclidean"``: d = √d² ∈ [0, √2];
* ``"angular"``: arccos(‖X̄ᵀȲ‖_*) ∈ [0, π/2] (Williams et al.'s shape metric; a metric on
  the quotient space, satisfies the triangle inequality).

Lower is more similar; 0 iff Y is an orthogonal transform of X up to translation and
isotropic scaling.

**Precision near 0.** ``2 − 2‖X̄ᵀȲ‖_*`` loses every digit when the shapes nearly coincide:
the nuclear norm is 1 up to a rounding error of ~1e-16, so d² carries an absolute error of
~1e-16 and d = √d² one of ~1e-8 (an exact rotation would score ≈ 1e-8). Whenever
``2 − 2‖X̄ᵀȲ‖_*`` is below :data:`RESIDUAL_BELOW` the distance is therefore computed from
the residual itself, ``d² = ‖X̄ − ȲQ‖²_F`` with the optimal ``Q = UVᵀ`` (from the SVD
``ȲᵀX̄ = UΣVᵀ``, both inputs zero-padded to a common width), whose entries are small and
exact to rounding: an exact rotation scores ~1e-15 (as netrep's Procrustes metric), and
``angular`` is taken as ``2·arcsin(d/2)``, the same angle without ``arccos``'s loss at 1.

Invariant to orthogonal transforms, isotropic scaling and translation of either input; not
to general invertible linear maps. Computed in float64 in O(n·p·q) (the
p×q cross product and its singular values); an input wider than n is first reduced to n
columns by a QR of its transpose, which leaves every singular value of X̄ᵀȲ unchanged.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .inputs import as_tensor_pair, center_columns, check_choice

KINDS = ("squared", "euclidean", "angular")


def _normalized(Z: torch.Tensor) -> torch.Tensor:
    """Centred, unit-Frobenius-norm copy, reduced to at most n columns."""
    Zc = center_columns(Z)
    Zc = Zc / torch.linalg.matrix_norm(Zc)
    n, d = Zc.shape
    if d > n:
        # Zcᵀ = QR → Zc = Rᵀ Qᵀ with orthonormal Q: Rᵀ has the same row geometry
        _, R = torch.linalg.qr(Zc.T, mode="reduced")
        Zc = R.T.contiguous()
    return Zc


#: Below this value of ``2 − 2‖X̄ᵀȲ‖_*`` the distance is recomputed from the residual.
RESIDUAL_BELOW = 1e-4


def _residual_sq(X: torch.Tensor, Y: torch.Tensor) -> float:
    """``min_Q ‖X̄ − ȲQ‖²_F`` over orthogonal Q, from the residual matrix (stable near 0)."""
    p, q = X.shape[1], Y.shape[1]
    w = max(p, q)
    if p < w:
        X = torch.nn.functional.pad(X, (0, w - p))
    if q < w:
        Y = torch.nn.functional.pad(Y, (0, w - q))
    U, _, Vh = torch.linalg.svd(Y.T @ X)
    R = X - Y @ (U @ Vh)
    return float((R * R).sum())


def _distance(X: torch.Tensor, Y: torch.Tensor, kind: str) -> float:
    """The Procrustes distance of normalised inputs in the form ``kind``."""
    nuc = float(torch.linalg.svdvals(X.T @ Y).sum())
    nuc = min(max(nuc, 0.0), 1.0)            # ≤ ‖X̄‖_F‖Ȳ‖_F = 1 up to rounding
    d2 = max(0.0, 2.0 - 2.0 * nuc)
    if d2 < RESIDUAL_BELOW:
        d2 = min(_residual_sq(X, Y), 4.0)
        if kind == "angular":
            return float(2.0 * np.arcsin(min(1.0, np.sqrt(d2) / 2.0)))
    if kind == "angular":
        return float(np.arccos(nuc))
    return d2 if kind == "squared" else float(np.sqrt(d2))


class _ProcrustesPrepared:
    """Normalised inputs kept for repeated evaluation on ``Y[perm]``."""

    def __init__(self, X: Any, Y: Any, kind: Any):
        self.kind = check_choice(kind, "kind", KINDS, what="Procrustes")
        X, Y, _ = as_tensor_pair(X, Y, what="Procrustes", min_n=4)
        with torch.no_grad():
            self.X, self.Y = _normalized(X.detach()), _normalized(Y.detach())
            self.value = self._value(self.Y)

    def _value(self, Yp: torch.Tensor) -> float:
        return _distance(self.X, Yp, self.kind)

    def permuted(self, perm: np.ndarray) -> float:
        with torch.no_grad():
            return self._value(self.Y[torch.as_tensor(perm, device=self.Y.device)])


def _prepare_procrustes(X: Any, Y: Any, *, kind: str = "squared") -> _ProcrustesPrepared:
    return _ProcrustesPrepared(X, Y, kind)


def procrustes_distance(X: Any, Y: Any, *, kind: str = "squared") -> float:
    """Orthogonal Procrustes distance of centred, Frobenius-normalised X and Y.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images (rows); widths may differ.
    kind : {"squared", "euclidean", "angular"}, default="squared"
        ``2 − 2‖X̄ᵀȲ‖_*``, its square root, or ``arccos ‖X̄ᵀȲ‖_*`` (module docstring).

    Returns
    -------
    float ≥ 0; **lower is more similar** (0 for identical shapes).
    """
    return _ProcrustesPrepared(X, Y, kind).value
