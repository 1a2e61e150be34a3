"""Centered kernel alignment (CKA): linear and RBF kernels, biased and debiased HSIC.

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

**Linear kernel, feature space.** ``K = XXᵀ`` never needs to be formed: each term of HSIC_u
has a feature-space form, O(n·d²) instead of O(n²·d):

* ``tr(K̃L̃) = ‖XᵀY‖²_F − Σᵢ |xᵢ|²|yᵢ|²``
* ``1ᵀK̃1 = |Xᵀ1|² − Σᵢ |xᵢ|²``
* ``1ᵀK̃L̃1 = (K̃1)·(L̃1)`` with ``K̃1 = X(Xᵀ1) − (|xᵢ|²)ᵢ``

and the biased linear CKA is ``‖XcᵀYc‖²_F / (‖XcᵀXc‖_F ‖YcᵀYc‖_F)`` on column-centred
inputs. Inputs are column-centred first (HSIC is translation invariant for the linear
kernel; centring only improves accuracy) and everything is accumulated in float64. Torch
inputs keep the autograd graph.

**RBF kernel.** ``K_ij = exp(−‖xᵢ − xⱼ‖² / (2σ²))`` needs the n×n matrices (float64; about
0.8 GB each at n = 10 000). The bandwidth has an explicit mode, computed separately for X
and for Y:

* ``sigma_mode="median_fraction"`` (default; Kornblith et al.'s convention):
  σ = sigma · √median_{i<j} ‖xᵢ − xⱼ‖². Invariant to isotropic scaling. Kornblith's
  reference notebook takes the median over the full n×n matrix including its n zero
  diagonal entries; here the diagonal is left out (the spec's definition; the difference
  vanishes as n grows). An even number of pairs gives the mean of the two middle values
  (numpy's median).
* ``sigma_mode="absolute"``: σ = sigma in feature units. This is what the consistency paper
  (thingsvision 2.6.10) ran as "CKA RBF 0.4", on **L2-normalised** features (squared
  distances in [0, 4]); :data:`SIMCONS_RBF_PRESET` holds those parameters. It is only
  meaningful on features normalised the same way (thingsvision < 2.6.7 silently ignored σ
  and always used σ = 1 — spec §5.1-1).

Fixed relative to thingsvision (spec §1.6, §4.1, §5.1-9): float64 instead of float32
kernels, each kernel built once per representation instead of six times per pair, and a
clear :class:`RDXInputError` instead of NaN/negative self-HSIC for degenerate inputs.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from ._inputs import (as_tensor_pair, block_rows, center_columns, check_choice,
                      check_positive, symmetric_gram)

#: Bandwidth modes of the RBF kernel (see the module docstring).
SIGMA_MODES = ("absolute", "median_fraction")
#: Parameters of the consistency paper's "CKA RBF 0.4" (thingsvision 2.6.10): an absolute
#: bandwidth on L2-normalised features, debiased HSIC. Normalise the rows first
#: (``X / ‖X‖`` per row) or the numbers mean something else.
SIMCONS_RBF_PRESET: dict[str, Any] = {"sigma": 0.4, "sigma_mode": "absolute", "debiased": True}


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


# ----------------------------------------------------------------------------- kernels
def _needs_grad(*Z: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(z.requires_grad for z in Z)


def squared_distances(Z: torch.Tensor) -> torch.Tensor:
    """n×n float64 squared Euclidean distances (exactly symmetric, zero diagonal, ≥ 0).

    Computed as ``|x|² + |y|² − 2x·y`` on column-centred data (exact translation invariance
    and far less cancellation than on raw features). Without autograd the matrix is built in
    place from upper-triangle GEMM strips; with autograd an out-of-place version is used.
    """
    Zc = center_columns(Z.to(torch.float64))
    sq = (Zc * Zc).sum(dim=1)
    if _needs_grad(Zc):
        n = Zc.shape[0]
        off = 1.0 - torch.eye(n, dtype=Zc.dtype, device=Zc.device)
        return (sq[:, None] + sq[None, :] - 2.0 * (Zc @ Zc.T)).clamp_min(0.0) * off
    with torch.no_grad():
        D = symmetric_gram(Zc)
        D.mul_(-2.0).add_(sq[:, None]).add_(sq[None, :]).clamp_(min=0.0)
        D.fill_diagonal_(0.0)
    return D


def median_pairwise_squared_distance(D: torch.Tensor) -> float:
    """Median of ``D_ij`` over the n(n−1)/2 pairs i < j (mean of the two middle values when
    their number is even, as numpy's median). O(n²) time, one n(n−1)/2 buffer."""
    n = D.shape[0]
    with torch.no_grad():
        vals = torch.cat([D[i, i + 1:].detach() for i in range(n - 1)])
        m = vals.numel()
        lo, hi = (m - 1) // 2, m // 2
        if vals.is_cuda:
            a = float(torch.kthvalue(vals, lo + 1).values)
            b = float(torch.kthvalue(vals, hi + 1).values) if hi != lo else a
        else:
            arr = vals.numpy()
            arr.partition([lo, hi])      # in place: no second copy of the n²/2 values
            a, b = float(arr[lo]), float(arr[hi])
    return 0.5 * (a + b)


def rbf_bandwidth(D: torch.Tensor, sigma: float, sigma_mode: str, *, name: str = "X") -> float:
    """σ of the RBF kernel of one representation, from its squared-distance matrix ``D``."""
    if sigma_mode == "absolute":
        return float(sigma)
    med = median_pairwise_squared_distance(D)
    if not med > 0:
        raise RDXInputError(
            f"RBF CKA: the median pairwise distance of {name} is 0 (more than half of the "
            "image pairs are identical), so sigma_mode='median_fraction' has no scale; "
            "remove duplicate images or use sigma_mode='absolute'.")
    return float(sigma) * float(np.sqrt(med))


def rbf_kernel(Z: Any, *, sigma: float = 1.0, sigma_mode: str = "median_fraction"
               ) -> tuple[torch.Tensor, float]:
    """RBF Gram matrix ``exp(−‖zᵢ − zⱼ‖²/(2σ²))`` (float64, n×n) and the σ used.

    Parameters
    ----------
    Z : array-like or torch.Tensor of shape (n, d)
    sigma : float, default=1.0
        Absolute bandwidth (``sigma_mode="absolute"``) or the fraction of the root median
        squared pairwise distance (``"median_fraction"``).
    sigma_mode : {"median_fraction", "absolute"}
    """
    Z, _, _ = as_tensor_pair(Z, Z, what="RBF kernel", min_n=2)
    sigma = check_positive(sigma, "sigma", what="RBF kernel")
    check_choice(sigma_mode, "sigma_mode", SIGMA_MODES, what="RBF kernel")
    D = squared_distances(Z)
    s = rbf_bandwidth(D, sigma, sigma_mode, name="the input")
    if _needs_grad(D):
        return torch.exp(D * (-0.5 / s ** 2)), s
    return D.mul_(-0.5 / s ** 2).exp_(), s


def _center_kernel(K: torch.Tensor, debiased: bool) -> torch.Tensor:
    """U-centred (debiased) or doubly centred (biased) kernel; in place unless autograd.

    U-centring: K̃ = K with zero diagonal, r = K̃1, s = 1ᵀK̃1,
    U_ij = K̃_ij − r_i/(n−2) − r_j/(n−2) + s/((n−1)(n−2)) (i ≠ j), U_ii = 0.
    Double centring: HKH = K − m_i − m_j + m̄ with row means m (K symmetric).
    """
    n = K.shape[0]
    inplace = not _needs_grad(K)
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


def _inner(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``Σ_ij A_ij B_ij`` in float64, in row blocks (no n×n temporary) unless autograd."""
    if _needs_grad(A, B):
        return (A * B).sum()
    n = A.shape[0]
    step = block_rows(A.shape[1])
    total = torch.zeros((), dtype=torch.float64, device=A.device)
    for s in range(0, n, step):
        total += (A[s:s + step] * B[s:s + step]).sum()
    return total


def _hsic_scale(n: int, debiased: bool) -> float:
    return 1.0 / (n * (n - 3)) if debiased else 1.0 / (n - 1) ** 2


def _check_self_hsic(hkk: torch.Tensor, hll: torch.Tensor, *, debiased: bool,
                     hint: str) -> None:
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
    Kc = _center_kernel(K.clone() if not _needs_grad(K) else K, debiased)
    Lc = _center_kernel(L.clone() if not _needs_grad(L) else L, debiased)
    out = _inner(Kc, Lc) * _hsic_scale(n, debiased)
    return float(out) if numpy_in else out


def kernel_cka(K: Any, L: Any, *, debiased: bool = True) -> Any:
    """CKA of two precomputed n×n Gram matrices (any kernel); inputs are not modified."""
    K, L, numpy_in = _as_kernel_pair(K, L)
    n = K.shape[0]
    if debiased and n < 4:
        raise RDXInputError(f"debiased CKA needs at least 4 images, got n={n} (the "
                            "debiased HSIC estimator divides by n(n−3)).")
    Kc = _center_kernel(K.clone() if not _needs_grad(K) else K, debiased)
    Lc = _center_kernel(L.clone() if not _needs_grad(L) else L, debiased)
    hkl, hkk, hll = _inner(Kc, Lc), _inner(Kc, Kc), _inner(Lc, Lc)
    _check_self_hsic(hkk, hll, debiased=debiased, hint="use more images or another kernel.")
    out = hkl / torch.sqrt(hkk * hll)
    return float(out) if numpy_in else out


class _KernelCKAPrepared:
    """Centred kernels of X and Y kept for repeated evaluation under row permutations of Y.

    ``permuted(perm)`` is the CKA of X and ``Y[perm]``: centring commutes with a joint
    permutation of rows and columns, so only ``⟨K̃, P L̃ Pᵀ⟩`` is recomputed (O(n²) per
    permutation, no kernel rebuild).
    """

    def __init__(self, Kc: torch.Tensor, Lc: torch.Tensor, debiased: bool, hint: str):
        self.Kc, self.Lc = Kc, Lc
        self.hkk, self.hll = _inner(Kc, Kc), _inner(Lc, Lc)
        _check_self_hsic(self.hkk, self.hll, debiased=debiased, hint=hint)
        self.norm = torch.sqrt(self.hkk * self.hll)
        self.value = float(_inner(Kc, Lc) / self.norm)

    def permuted(self, perm: np.ndarray) -> float:
        p = torch.as_tensor(perm, device=self.Lc.device)
        n = self.Kc.shape[0]
        step = block_rows(n)
        total = torch.zeros((), dtype=torch.float64, device=self.Kc.device)
        for s in range(0, n, step):
            total += (self.Kc[s:s + step] * self.Lc[p[s:s + step]][:, p]).sum()
        return float(total / self.norm)


def _rbf_inputs(X: Any, Y: Any, sigma: Any, sigma_mode: Any, debiased: Any
                ) -> tuple[torch.Tensor, torch.Tensor, bool, float, str, bool]:
    if not isinstance(debiased, (bool, np.bool_)):
        raise RDXInputError(f"RBF CKA: debiased must be True or False, got {debiased!r}.")
    X, Y, numpy_in = _as_pair(X, Y, min_n=4 if debiased else 2)
    sigma = check_positive(sigma, "sigma", what="RBF CKA")
    check_choice(sigma_mode, "sigma_mode", SIGMA_MODES, what="RBF CKA")
    return X, Y, numpy_in, sigma, sigma_mode, bool(debiased)


def _rbf_centered(Z: torch.Tensor, sigma: float, sigma_mode: str, debiased: bool,
                  name: str) -> tuple[torch.Tensor, float]:
    D = squared_distances(Z)
    s = rbf_bandwidth(D, sigma, sigma_mode, name=name)
    K = torch.exp(D * (-0.5 / s ** 2)) if _needs_grad(D) else D.mul_(-0.5 / s ** 2).exp_()
    return _center_kernel(K, debiased), s


_RBF_HINT = ("the kernel is (nearly) constant or the identity; with sigma_mode='absolute' "
             "check that sigma is on the scale of the pairwise distances, or use more images.")


def rbf_cka(X: Any, Y: Any, *, sigma: float = 1.0, sigma_mode: str = "median_fraction",
            debiased: bool = True) -> Any:
    """CKA with RBF kernels ``exp(−‖xᵢ − xⱼ‖²/(2σ²))``, debiased by default.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n images (rows).
    sigma : float, default=1.0
        Bandwidth: a fraction of √(median pairwise squared distance) of each representation
        (``sigma_mode="median_fraction"``; 1.0 is the default of Kornblith et al.'s
        reference code) or an absolute σ in feature units (``"absolute"``; the consistency
        paper's "CKA RBF 0.4" is ``sigma=0.4`` on L2-normalised features, see
        :data:`SIMCONS_RBF_PRESET`).
    sigma_mode : {"median_fraction", "absolute"}
    debiased : bool, default=True
        U-statistic HSIC (Song et al. 2012) or the biased ``tr(KHLH)`` estimator.

    Returns
    -------
    float, or a float64 torch scalar for torch inputs (differentiable; the median bandwidth
    is treated as a constant).

    Raises
    ------
    RDXInputError
        Bad shapes/values/parameters, n < 4 (debiased), or a degenerate kernel (HSIC of a
        kernel with itself not positive, e.g. σ far below the pairwise distances).

    Notes
    -----
    Memory: two n×n float64 matrices (1.6 GB at n = 10 000) plus row-block temporaries.
    """
    X, Y, numpy_in, sigma, sigma_mode, debiased = _rbf_inputs(X, Y, sigma, sigma_mode,
                                                              debiased)
    Kc, _ = _rbf_centered(X, sigma, sigma_mode, debiased, "X")
    Lc, _ = _rbf_centered(Y, sigma, sigma_mode, debiased, "Y")
    hkl, hkk, hll = _inner(Kc, Lc), _inner(Kc, Kc), _inner(Lc, Lc)
    _check_self_hsic(hkk, hll, debiased=debiased, hint=_RBF_HINT)
    out = hkl / torch.sqrt(hkk * hll)
    return float(out) if numpy_in else out


class RBFKernelState:
    """One representation's centred RBF kernel ``Kc`` (n×n float64), its self-HSIC ``h``
    (unnormalised, ``⟨Kc, Kc⟩``) and bandwidth ``sigma``.

    Built once per representation, it serves every pair it is part of:
    ``rbf_cka(X, Y) == cka_of_states(state(X), state(Y))`` exactly (same operations).
    """

    def __init__(self, Kc: torch.Tensor, h: torch.Tensor, sigma: float):
        self.Kc, self.h, self.sigma = Kc, h, sigma

    @property
    def nbytes(self) -> int:
        return self.Kc.numel() * self.Kc.element_size()


def rbf_kernel_state(Z: Any, *, sigma: float = 1.0, sigma_mode: str = "median_fraction",
                     debiased: bool = True, name: str = "X") -> RBFKernelState:
    """Validated :class:`RBFKernelState` of one representation (parameters as
    :func:`rbf_cka`); raises :class:`RDXInputError` for a degenerate kernel."""
    Z, _, _, sigma, sigma_mode, debiased = _rbf_inputs(Z, Z, sigma, sigma_mode, debiased)
    with torch.no_grad():
        Kc, s = _rbf_centered(Z.detach(), sigma, sigma_mode, debiased, name)
        h = _inner(Kc, Kc)
    if not float(h) > 0:
        raise RDXInputError(f"{'debiased' if debiased else 'biased'} RBF CKA is undefined for "
                            f"{name}: the HSIC of its kernel with itself is not positive "
                            f"({float(h):.3g}); {_RBF_HINT}")
    return RBFKernelState(Kc, h, s)


def cka_of_states(a: RBFKernelState, b: RBFKernelState) -> float:
    """Kernel CKA of two representations from their :class:`RBFKernelState`."""
    return float(_inner(a.Kc, b.Kc) / torch.sqrt(a.h * b.h))


def rbf_bandwidths(X: Any, Y: Any, *, sigma: float = 1.0,
                   sigma_mode: str = "median_fraction") -> tuple[float, float]:
    """The absolute σ that :func:`rbf_cka` uses for X and for Y (for reporting, spec C7)."""
    X, Y, _, sigma, sigma_mode, _ = _rbf_inputs(X, Y, sigma, sigma_mode, False)
    return (rbf_bandwidth(squared_distances(X.detach()), sigma, sigma_mode, name="X"),
            rbf_bandwidth(squared_distances(Y.detach()), sigma, sigma_mode, name="Y"))


def _prepare_rbf_cka(X: Any, Y: Any, *, sigma: float = 1.0,
                     sigma_mode: str = "median_fraction",
                     debiased: bool = True) -> _KernelCKAPrepared:
    X, Y, _, sigma, sigma_mode, debiased = _rbf_inputs(X, Y, sigma, sigma_mode, debiased)
    with torch.no_grad():
        Kc, _ = _rbf_centered(X.detach(), sigma, sigma_mode, debiased, "X")
        Lc, _ = _rbf_centered(Y.detach(), sigma, sigma_mode, debiased, "Y")
    return _KernelCKAPrepared(Kc, Lc, debiased, _RBF_HINT)


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
        p = torch.as_tensor(perm, device=self.Y.device)
        return self._cross(self.Y[p], p)
