"""Centered kernel alignment (CKA) with the linear kernel, in feature space, biased and
debiased HSIC.

CKA(X, Y) = HSIC(K, L) / √(HSIC(K, K)·HSIC(L, L)) for the n×n kernel (Gram) matrices
``K = k(X)``, ``L = k(Y)`` of the same n images (Kornblith et al. 2019); the HSIC estimators
and CKA of any precomputed kernels: :mod:`rdx.similarity.cka_kernel`; RBF kernels:
:mod:`rdx.similarity.cka_rbf`.

**Linear kernel, feature space.** ``K = XXᵀ`` never needs to be formed: each term of HSIC_u
has a feature-space form, O(n·d²) instead of O(n²·d):

* ``tr(K̃L̃) = ‖XᵀY‖²_F − Σᵢ |xᵢ|²|yᵢ|²``
* ``1ᵀK̃1 = |Xᵀ1|² − Σᵢ |xᵢ|²``
* ``1ᵀK̃L̃1 = (K̃1)·(L̃1)`` with ``K̃1 = X(Xᵀ1) − (|xᵢ|²)ᵢ``

and the biased linear CKA is ``‖XcᵀYc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F)`` on column-centred
inputs. Inputs are column-centred first (HSIC is translation invariant for the linear
kernel; centring only improves accuracy) and everything is accumulated in float64. Torch
inputs keep the autograd graph.

**Large n.** Numpy inputs whose float64 copies would exceed
:data:`~rdx.similarity.cka_streamed.STREAM_BYTES` are streamed in row blocks
(:mod:`rdx.similarity.cka_streamed`); the values equal the in-memory formula up to float64
rounding.

**Permutations.** :class:`_LinearCKAPrepared` keeps the self-terms of a pair for the
permutation null (a row permutation of Y only changes the cross term), in the n×n kernel
form (:class:`rdx.similarity.cka_kernel.KernelCKAPrepared`) when there are fewer images
than feature pairs.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .cka_kernel import KernelCKAPrepared, center_kernel
from .cka_streamed import linear_cka_streamed, stream_inputs
from .inputs import as_tensor_pair


def _as_pair(X: Any, Y: Any, *, min_n: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Both inputs as float64 tensors on a common device; True if the caller gave numpy."""
    return as_tensor_pair(X, Y, what="CKA", min_n=min_n)


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
    self-similarity of an input is not positive (degenerate, e.g. tiny n). Large numpy
    inputs are streamed (:func:`linear_cka_streamed`).
    """
    big = stream_inputs(X, Y)
    if big is not None:
        return linear_cka_streamed(*big, debiased=True)
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

    Returns a float64 torch scalar for torch inputs, a float for numpy inputs (large ones
    streamed: :func:`linear_cka_streamed`).
    """
    big = stream_inputs(X, Y)
    if big is not None:
        return linear_cka_streamed(*big, debiased=False)
    X, Y, numpy_in = _as_pair(X, Y, min_n=2)
    X, Y = _center(X), _center(Y)
    num = ((X.T @ Y) ** 2).sum()
    den = torch.sqrt(((X.T @ X) ** 2).sum() * ((Y.T @ Y) ** 2).sum())
    cka = num / den
    return float(cka) if numpy_in else cka


#: Linear CKA permutations use the n×n kernel form when n·(this) < p·q (a gathered n² inner
#: product against an n·p·q matrix product per permutation) ...
KERNEL_PERMUTATION_COST = 8
#: ... and n is at most this (two n×n float64 Gram matrices: 256 MiB at 4 096).
KERNEL_PERMUTATION_MAX_N = 4096


class _LinearCKAPrepared:
    """Linear CKA with the self-terms cached, for repeated evaluation on ``Y[perm]``.

    A row permutation of Y leaves HSIC(L, L), the column sums and the row norms (up to
    reordering) unchanged, so each permutation only costs the cross term (O(n·p·q)).
    """

    def __init__(self, X: Any, Y: Any, debiased: bool):
        X, Y, _ = _as_pair(X, Y, min_n=4 if debiased else 2)
        with torch.no_grad():
            self.X, self.Y = _center(X.detach()), _center(Y.detach())
            self.debiased = debiased
            if debiased:
                self.nx = (self.X * self.X).sum(dim=1)
                self.ny = (self.Y * self.Y).sum(dim=1)
                self.sx, self.sy = self.X.sum(dim=0), self.Y.sum(dim=0)
                hxx = _hsic_u_terms(self.X, self.X, self.X.T @ self.X, self.nx, self.nx,
                                    self.sx, self.sx)
                hyy = _hsic_u_terms(self.Y, self.Y, self.Y.T @ self.Y, self.ny, self.ny,
                                    self.sy, self.sy)
                if not (float(hxx) > 0 and float(hyy) > 0):
                    raise RDXInputError(
                        "debiased CKA is undefined for these inputs: the unbiased HSIC "
                        "estimate of an input with itself is not positive; use more images.")
                self.norm = torch.sqrt(hxx * hyy)
            else:
                self.norm = torch.sqrt(((self.X.T @ self.X) ** 2).sum()
                                       * ((self.Y.T @ self.Y) ** 2).sum())
            self.value = self._cross(self.Y, None)
        self._kernels: KernelCKAPrepared | None = None

    def _cross(self, Yp: torch.Tensor, perm: torch.Tensor | None) -> float:
        with torch.no_grad():
            XtY = self.X.T @ Yp
            if self.debiased:
                ny = self.ny if perm is None else self.ny[perm]
                h = _hsic_u_terms(self.X, Yp, XtY, self.nx, ny, self.sx, self.sy)
            else:
                h = (XtY * XtY).sum()
            return float(h / self.norm)

    def permuted(self, perm: np.ndarray) -> float:
        n, p_dim, q_dim = self.X.shape[0], self.X.shape[1], self.Y.shape[1]
        if n * KERNEL_PERMUTATION_COST < p_dim * q_dim and n <= KERNEL_PERMUTATION_MAX_N:
            # fewer images than feature pairs: the kernel form ⟨K̃, P L̃ Pᵀ⟩ costs O(n²) per
            # permutation instead of the cross term's O(n·p·q) (same value: CKA with linear
            # kernels is linear CKA); the centred Gram matrices are built on first use
            if self._kernels is None:
                with torch.no_grad():
                    self._kernels = KernelCKAPrepared(
                        center_kernel(self.X @ self.X.T, self.debiased),
                        center_kernel(self.Y @ self.Y.T, self.debiased), self.debiased,
                        "use more images.")
            return self._kernels.permuted(perm)
        p = torch.as_tensor(perm, device=self.Y.device)
        return self._cross(self.Y[p], p)
