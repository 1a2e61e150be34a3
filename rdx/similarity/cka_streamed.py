"""Linear CKA of large numpy inputs, streamed in row blocks.

Numpy inputs whose float64 copies would exceed :data:`STREAM_BYTES` are streamed in row
blocks (:func:`linear_cka_streamed`): a pass for the column means, then one accumulating the
d×d cross products, column sums and the vectors the debiased terms need, so memory is
O(d² + n) beyond the caller's arrays (n = 100 000, d = 768: the inputs plus a few MB, instead
of four float64 copies — 2.4 GB). The values equal the in-memory formula of
:mod:`rdx.similarity.cka` up to float64 rounding.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..errors import RDXInputError

#: Numpy inputs of the linear CKAs whose float64 copies (both inputs) would take more bytes
#: than this are streamed in row blocks (:func:`linear_cka_streamed`).
STREAM_BYTES = 512 * 2**20
#: Bytes of a float64 row block of the streamed linear CKA.
_STREAM_BLOCK_BYTES = 32 * 2**20


def stream_inputs(X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """Both inputs as numpy arrays when they should be streamed (see :data:`STREAM_BYTES`),
    else None (torch inputs never are: they may carry an autograd graph)."""
    if isinstance(X, torch.Tensor) or isinstance(Y, torch.Tensor):
        return None
    if not (isinstance(X, np.ndarray) and isinstance(Y, np.ndarray)):
        return None
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        return None   # the in-memory path gives the error message
    if 8 * X.shape[0] * (X.shape[1] + Y.shape[1]) <= STREAM_BYTES:
        return None
    return X, Y


def _check_stream_arrays(X: np.ndarray, Y: np.ndarray, min_n: int) -> None:
    """The checks of :func:`rdx.similarity.inputs.as_tensor_pair`, without a float64 copy."""
    for name, Z in (("X", X), ("Y", Y)):
        if Z.dtype.kind not in "biuf":
            raise RDXInputError(f"CKA input {name} has dtype {Z.dtype}; expected real numbers "
                                "(an n_images × n_features array).")
        if Z.shape[1] == 0:
            raise RDXInputError(f"CKA input {name} has no features (shape {Z.shape}).")
    if X.shape[0] < min_n:
        raise RDXInputError(f"CKA needs at least {min_n} images, got n={X.shape[0]}.")


def linear_cka_streamed(X: np.ndarray, Y: np.ndarray, *, debiased: bool = True,
                        block_rows: int | None = None) -> float:
    """Linear CKA (debiased or biased) of two numpy arrays in row blocks, without float64
    copies of the inputs.

    One pass over row blocks (centred with the column means of a first pass) accumulates
    ``XᵀY``, ``XᵀX``, ``YᵀY``, the column sums ``s_x``, ``s_y``, the row norms ``|xᵢ|²``,
    ``|yᵢ|²`` and ``Σᵢ |xᵢ|² xᵢ``, ``Σᵢ |yᵢ|² yᵢ``, ``Σᵢ |yᵢ|² xᵢ``, ``Σᵢ |xᵢ|² yᵢ``. The
    debiased cross term then follows without another pass:
    ``Σᵢ (xᵢ·s_x − |xᵢ|²)(yᵢ·s_y − |yᵢ|²) = s_xᵀ(XᵀY)s_y − (Σ|xᵢ|²yᵢ)·s_y
    − (Σ|yᵢ|²xᵢ)·s_x + Σ|xᵢ|²|yᵢ|²``. Same formulas as
    :func:`rdx.similarity.cka.debiased_linear_cka` /
    :func:`~rdx.similarity.cka.biased_linear_cka`; values equal up to float64 rounding.
    """
    min_n = 4 if debiased else 2
    _check_stream_arrays(X, Y, min_n)
    n, p = X.shape
    q = Y.shape[1]
    step = int(block_rows or max(1, _STREAM_BLOCK_BYTES // (8 * (p + q))))
    mx, my = np.zeros(p), np.zeros(q)
    X0, Y0 = X[:1].astype(np.float64), Y[:1].astype(np.float64)
    varies = {"X": False, "Y": False}
    peak = {"X": 0.0, "Y": 0.0}
    for a in range(0, n, step):
        for name, Z, m, Z0 in (("X", X, mx, X0), ("Y", Y, my, Y0)):
            blk = np.asarray(Z[a:a + step], dtype=np.float64)
            if not np.isfinite(blk).all():
                bad = (a + np.flatnonzero(~np.isfinite(blk).all(axis=1))[:5]).tolist()
                raise RDXInputError(
                    f"CKA input {name} contains NaN/inf values (first rows: {bad}); remove "
                    "those images from both representations or fix the features.")
            m += blk.sum(axis=0)
            peak[name] = max(peak[name], float(np.abs(blk).max(initial=0.0)))
            varies[name] = varies[name] or bool((blk != Z0).any())
    for name, v in peak.items():   # as as_tensor_pair: overflow would end as NaN
        V.check_magnitude(v, f"CKA input {name}", "float64")
    for name, v in varies.items():
        if not v:
            raise RDXInputError(
                f"CKA input {name} is constant (all {n} images have the same features), so "
                "it carries no similarity structure and the measure is undefined. Check the "
                "layer choice or the feature extraction.")
    mx /= n
    my /= n
    XtY, XtX, YtY = np.zeros((p, q)), np.zeros((p, p)), np.zeros((q, q))
    sx, sy = np.zeros(p), np.zeros(q)
    nx, ny = np.empty(n), np.empty(n)
    ux, uy, wx, wy = np.zeros(p), np.zeros(q), np.zeros(p), np.zeros(q)
    for a in range(0, n, step):
        xb = np.asarray(X[a:a + step], dtype=np.float64) - mx
        yb = np.asarray(Y[a:a + step], dtype=np.float64) - my
        XtY += xb.T @ yb
        XtX += xb.T @ xb
        YtY += yb.T @ yb
        sx += xb.sum(axis=0)
        sy += yb.sum(axis=0)
        bx, by = np.einsum("ij,ij->i", xb, xb), np.einsum("ij,ij->i", yb, yb)
        nx[a:a + len(bx)], ny[a:a + len(by)] = bx, by
        ux += bx @ xb
        uy += by @ yb
        wx += by @ xb
        wy += bx @ yb
    if not debiased:
        return float((XtY ** 2).sum() / np.sqrt((XtX ** 2).sum() * (YtY ** 2).sum()))

    def hsic_u(G: np.ndarray, na: np.ndarray, nb: np.ndarray, sa: np.ndarray, sb: np.ndarray,
               wa: np.ndarray, wb: np.ndarray) -> float:
        # wa = Σ |b_i|² a_i, wb = Σ |a_i|² b_i (see the docstring)
        tr = (G ** 2).sum() - (na * nb).sum()
        one_a = sa @ sa - na.sum()
        one_b = sb @ sb - nb.sum()
        cross = sa @ G @ sb - wb @ sb - wa @ sa + (na * nb).sum()
        return float(tr + one_a * one_b / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * cross)

    hxy = hsic_u(XtY, nx, ny, sx, sy, wx, wy)
    hxx = hsic_u(XtX, nx, nx, sx, sx, ux, ux)
    hyy = hsic_u(YtY, ny, ny, sy, sy, uy, uy)
    if not (hxx > 0 and hyy > 0):
        raise RDXInputError(
            "debiased CKA is undefined for these inputs: the unbiased HSIC estimate of an "
            f"input with itself is not positive (HSIC_u(X,X)·n(n−3)={hxx:.3g}, "
            f"HSIC_u(Y,Y)·n(n−3)={hyy:.3g}); use more images.")
    return float(hxy / np.sqrt(hxx * hyy))
