"""HSIC of kernel (Gram) matrices and the CKA built on it, for any kernel.

CKA(X, Y) = HSIC(K, L) / √(HSIC(K, K)·HSIC(L, L)) for the n×n kernel (Gram) matrices
``K = k(X)``, ``L = k(Y)`` of the same n images (Kornblith et al. 2019).

HSIC estimators (the constant factors cancel in the ratio):

* biased ("vanilla"): HSIC_b(K, L) = tr(KHLH)/(n−1)² = ⟨HKH, HLH⟩_F/(n−1)², H = I − 11ᵀ/n;
* debiased (U-statistic, Song et al. 2012): with diag(K) = diag(L) = 0 (K̃, L̃),
  HSIC_u = [tr(K̃L̃) + (1ᵀK̃1)(1ᵀL̃1)/((n−1)(n−2)) − 2/(n−2)·1ᵀK̃L̃1] / (n(n−3)),
  equal to ⟨U(K), U(L)⟩_F/(n(n−3)) with the U-centring of Székely & Rizzo (2014)
  U(K)_ij = K̃_ij − r_i/(n−2) − r_j/(n−2) + s/((n−1)(n−2)) for i ≠ j, U(K)_ii = 0
  (r = K̃1, s = 1ᵀK̃1). The debiased estimate is the default everywhere (as in the
  consistency paper); it can be negative and needs n ≥ 4.

The kernels of the measures: linear (:mod:`rdx.similarity.cka`, in feature space) and RBF
(:mod:`rdx.similarity.cka_rbf`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .inputs import as_tensor_pair, block_rows
from .memory import check_pairwise_memory


def needs_grad(*Z: torch.Tensor) -> bool:
    """Whether autograd records operations on any of ``Z`` (then kernels are built and
    centred out of place)."""
    return torch.is_grad_enabled() and any(z.requires_grad for z in Z)


def center_kernel(K: torch.Tensor, debiased: bool) -> torch.Tensor:
    """U-centred (debiased) or doubly centred (biased) kernel; in place unless autograd.

    U-centring: K̃ = K with zero diagonal, r = K̃1, s = 1ᵀK̃1,
    U_ij = K̃_ij − r_i/(n−2) − r_j/(n−2) + s/((n−1)(n−2)) (i ≠ j), U_ii = 0.
    Double centring: HKH = K − m_i − m_j + m̄ with row means m (K symmetric).
    """
    n = K.shape[0]
    inplace = not needs_grad(K)
    if debiased:
        if inplace:
            K.fill_diagonal_(0.0)
        else:
            K = K - torch.diag_embed(torch.diagonal(K))
        r = K.sum(dim=1)
        a = r / (n - 2)
        c = r.sum() / ((n - 1) * (n - 2))
        if inplace:
            K.sub_(a[:, None]).sub_(a[None, :]).add_(c).fill_diagonal_(0.0)
            return K
        off = 1.0 - torch.eye(n, dtype=K.dtype, device=K.device)
        return (K - a[:, None] - a[None, :] + c) * off
    m = K.mean(dim=1)
    mm = m.mean()
    if inplace:
        return K.sub_(m[:, None]).sub_(m[None, :]).add_(mm)
    return K - m[:, None] - m[None, :] + mm


def frobenius_inner(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``Σ_ij A_ij B_ij`` in float64, in row blocks (no n×n temporary) unless autograd."""
    if needs_grad(A, B):
        return (A * B).sum()
    n = A.shape[0]
    step = block_rows(A.shape[1])
    total = torch.zeros((), dtype=torch.float64, device=A.device)
    for s in range(0, n, step):
        total += (A[s:s + step] * B[s:s + step]).sum()
    return total


def _hsic_scale(n: int, debiased: bool) -> float:
    return 1.0 / (n * (n - 3)) if debiased else 1.0 / (n - 1) ** 2


def check_self_hsic(hkk: torch.Tensor, hll: torch.Tensor, *, debiased: bool,
                     hint: str) -> None:
    """Refuse (:class:`RDXInputError`, ending with ``hint``) when the HSIC of a kernel with
    itself is not positive: the CKA is then undefined."""
    with torch.no_grad():
        if not (float(hkk) > 0 and float(hll) > 0):
            raise RDXInputError(
                f"{'debiased' if debiased else 'biased'} kernel CKA is undefined for these "
                "inputs: the HSIC of a kernel with itself is not positive "
                f"(HSIC(K,K)∝{float(hkk):.3g}, HSIC(L,L)∝{float(hll):.3g}); {hint}")


def _as_kernel_pair(K: Any, L: Any) -> tuple[torch.Tensor, torch.Tensor, bool]:
    K, L, numpy_in = as_tensor_pair(K, L, what="kernel CKA", min_n=2)
    for name, M in (("K", K), ("L", L)):
        if M.shape[0] != M.shape[1]:
            raise RDXInputError(f"kernel CKA: {name} has shape {tuple(M.shape)}; expected a "
                                "square n×n Gram matrix.")
        with torch.no_grad():
            scale = float(M.abs().max())
            if not torch.allclose(M, M.T, rtol=1e-10, atol=1e-12 * scale):
                raise RDXInputError(f"kernel CKA: {name} is not symmetric; pass a Gram "
                                    "matrix k(xᵢ, xⱼ).")
    if K.shape != L.shape:
        raise RDXInputError(f"kernel CKA: K is {tuple(K.shape)} but L is {tuple(L.shape)}; "
                            "both must be Gram matrices of the same images.")
    return K, L, numpy_in


def hsic(K: Any, L: Any, *, debiased: bool = True) -> Any:
    """HSIC of two n×n Gram matrices: debiased U-statistic (default) or biased.

    ``HSIC_u = ⟨U(K), U(L)⟩_F / (n(n−3))`` (= Song et al.'s formula) or
    ``HSIC_b = ⟨HKH, HLH⟩_F / (n−1)²``. Float for numpy input, torch scalar for torch input.
    The inputs are not modified.
    """
    K, L, numpy_in = _as_kernel_pair(K, L)
    n = K.shape[0]
    if debiased and n < 4:
        raise RDXInputError(f"debiased HSIC needs at least 4 images, got n={n}.")
    check_pairwise_memory("HSIC", n, 16.0, K.device, matrices="centred copies of K and L")
    Kc = center_kernel(K.clone() if not needs_grad(K) else K, debiased)
    Lc = center_kernel(L.clone() if not needs_grad(L) else L, debiased)
    out = frobenius_inner(Kc, Lc) * _hsic_scale(n, debiased)
    return float(out) if numpy_in else out


def kernel_cka(K: Any, L: Any, *, debiased: bool = True) -> Any:
    """CKA of two precomputed n×n Gram matrices (any kernel); inputs are not modified."""
    K, L, numpy_in = _as_kernel_pair(K, L)
    n = K.shape[0]
    if debiased and n < 4:
        raise RDXInputError(f"debiased CKA needs at least 4 images, got n={n} (the "
                            "debiased HSIC estimator divides by n(n−3)).")
    check_pairwise_memory("kernel CKA", n, 16.0, K.device, matrices="centred copies of K "
                          "and L")
    Kc = center_kernel(K.clone() if not needs_grad(K) else K, debiased)
    Lc = center_kernel(L.clone() if not needs_grad(L) else L, debiased)
    hkl, hkk, hll = frobenius_inner(Kc, Lc), frobenius_inner(Kc, Kc), frobenius_inner(Lc, Lc)
    check_self_hsic(hkk, hll, debiased=debiased, hint="use more images or another kernel.")
    out = hkl / torch.sqrt(hkk * hll)
    return float(out) if numpy_in else out


class KernelCKAPrepared:
    """Centred kernels of X and Y kept for repeated evaluation under row permutations of Y.

    ``permuted(perm)`` is the CKA of X and ``Y[perm]``: centring commutes with a joint
    permutation of rows and columns, so only ``⟨K̃, P L̃ Pᵀ⟩`` is recomputed (O(n²) per
    permutation, no kernel rebuild).
    """

    def __init__(self, Kc: torch.Tensor, Lc: torch.Tensor, debiased: bool, hint: str):
        self.Kc, self.Lc = Kc, Lc
        self.hkk, self.hll = frobenius_inner(Kc, Kc), frobenius_inner(Lc, Lc)
        check_self_hsic(self.hkk, self.hll, debiased=debiased, hint=hint)
        self.norm = torch.sqrt(self.hkk * self.hll)
        self.value = float(frobenius_inner(Kc, Lc) / self.norm)

    def permuted(self, perm: np.ndarray) -> float:
        p = torch.as_tensor(perm, device=self.Lc.device)
        n = self.Kc.shape[0]
        step = block_rows(n)
        total = torch.zeros((), dtype=torch.float64, device=self.Kc.device)
        for s in range(0, n, step):
            total += (self.Kc[s:s + step] * self.Lc[p[s:s + step]][:, p]).sum()
        return float(total / self.norm)
