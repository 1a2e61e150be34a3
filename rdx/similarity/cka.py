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

**Large n.** Numpy inputs whose float64 copies would exceed :data:`STREAM_BYTES` are
streamed in row blocks (:func:`linear_cka_streamed`): a pass for the column means, then one
accumulating the d×d cross products, column sums and the vectors the debiased terms need, so
memory is O(d² + n) beyond
the caller's arrays (n = 100 000, d = 768: the inputs plus a few MB, instead of four
float64 copies — 2.4 GB). The values equal the in-memory formula up to float64 rounding.

**RBF kernel.** ``K_ij = exp(−‖xᵢ − xⱼ‖² / (2σ²))`` needs the n×n matrices (float64; about
0.8 GB each at n = 10 000). Above the available memory (or ``RDX_MEMORY_LIMIT_GB``) the RBF
measures refuse before computing, with the figure and the largest n that would fit
(:func:`check_pairwise_memory`; RSA does the same).

The bandwidth has an explicit mode, computed separately for X and for Y:

* ``sigma_mode="median_fraction"`` (default; Kornblith et al.'s convention):
  σ = sigma · √median_{i<j} ‖xᵢ − xⱼ‖². Invariant to isotropic scaling. Kornblith's
  reference notebook takes the median over the full n×n matrix including its n zero
  diagonal entries; here the diagonal is left out (the difference
  vanishes as n grows). An even number of pairs gives the mean of the two middle values
  (numpy's median).
* ``sigma_mode="absolute"``: σ = sigma in feature units. This is what the consistency paper
  (thingsvision 2.6.10) ran as "CKA RBF 0.4", on **L2-normalised** features (squared
  distances in [0, 4]); :data:`SIMCONS_RBF_PRESET` holds those parameters. It is only
  meaningful on features normalised the same way (thingsvision < 2.6.7 silently ignored σ
  and always used σ = 1).

Fixed relative to thingsvision: float64 instead of float32
kernels, each kernel built once per representation instead of six times per pair, and a
clear :class:`RDXInputError` instead of NaN/negative self-HSIC for degenerate inputs.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..backend import available_memory_bytes, format_bytes, memory_limit_from_env
from ..errors import RDXInputError
from .inputs import (as_tensor_pair, block_rows, center_columns, check_choice,
                      check_positive, symmetric_gram)
from .names import SIGMA_MODES   # the RBF kernel's bandwidth modes (module docstring)

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


#: Numpy inputs of the linear CKAs whose float64 copies (both inputs) would take more bytes
#: than this are streamed in row blocks (:func:`linear_cka_streamed`).
STREAM_BYTES = 512 * 2**20
#: Bytes of a float64 row block of the streamed linear CKA.
_STREAM_BLOCK_BYTES = 32 * 2**20


def check_pairwise_memory(what: str, n: int, bytes_per_n2: float, device: torch.device, *,
                          matrices: str) -> None:
    """Refuse a measure that needs ``bytes_per_n2 · n²`` bytes when that exceeds 90 % of the
    available memory (``RDX_MEMORY_LIMIT_GB`` caps it), naming the figure, the largest n that
    fits and the measures that scale."""
    need = bytes_per_n2 * float(n) * n
    avail = available_memory_bytes(device)
    if need <= 0.9 * avail:
        return
    fit = int(np.sqrt(0.9 * avail / bytes_per_n2))
    env = memory_limit_from_env() if device.type == "cpu" else None
    capped = " (capped by RDX_MEMORY_LIMIT_GB)" if env is not None and env <= avail else ""
    raise RDXInputError(
        f"{what} at n={n} images needs about {format_bytes(need)} of {device.type.upper()} "
        f"memory ({matrices}; memory grows with n²), but only {format_bytes(avail)} is "
        f"available{capped}. Compute it on a random subsample of at most {fit} images (the "
        "same rows of both representations), or use a measure that scales to this n: "
        "cka_linear (feature space, O(n·d²) time, O(d²) memory) or mutual_knn / cknna / "
        "jaccard_knn (k-NN, O(n·k) memory).")


def _stream_inputs(X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray] | None:
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
    − (Σ|yᵢ|²xᵢ)·s_x + Σ|xᵢ|²|yᵢ|²``. Same formulas as :func:`debiased_linear_cka` /
    :func:`biased_linear_cka`; values equal up to float64 rounding.
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


def debiased_linear_cka(X: Any, Y: Any) -> Any:
    """Debiased linear CKA of ``X`` (n×p) and ``Y`` (n×q) in O(n·(p²+q²+pq)).

    Returns a float64 torch scalar (differentiable) for torch inputs, a float for numpy
    inputs. Raises :class:`RDXInputError` for n < 4, a constant input, or when the debiased
    self-similarity of an input is not positive (degenerate, e.g. tiny n). Large numpy
    inputs are streamed (:func:`linear_cka_streamed`).
    """
    big = _stream_inputs(X, Y)
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
    big = _stream_inputs(X, Y)
    if big is not None:
        return linear_cka_streamed(*big, debiased=False)
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


#: The kernel's exponent ``−d²/(2σ²)`` is computed as ``d² · (−0.5/σ²)`` in float64: σ²
#: must neither overflow nor underflow, so σ must lie within these bounds.
SIGMA_BOUNDS = (1e-150, 1e150)


def rbf_bandwidth(D: torch.Tensor, sigma: float, sigma_mode: str, *, name: str = "X") -> float:
    """σ of the RBF kernel of one representation, from its squared-distance matrix ``D``.

    Raises
    ------
    RDXInputError
        When the median distance is 0 (``median_fraction``), or when σ is so small or so
        large that ``1/σ²`` overflows or underflows float64; the message gives the range
        of ``sigma`` that works for this data.
    """
    if sigma_mode == "absolute":
        s = float(sigma)
    else:
        med = median_pairwise_squared_distance(D)
        if not med > 0:
            raise RDXInputError(
                f"RBF CKA: the median pairwise distance of {name} is 0 (more than half of "
                "the image pairs are identical), so sigma_mode='median_fraction' has no "
                "scale; remove duplicate images or use sigma_mode='absolute'.")
        s = float(sigma) * float(np.sqrt(med))
    if not SIGMA_BOUNDS[0] <= s <= SIGMA_BOUNDS[1]:
        # only here, refusing: the median of the distances gives the useful range
        typical = float(np.sqrt(median_pairwise_squared_distance(D)))
        ranges = "sigma between 0.01 and 100 with sigma_mode='median_fraction' (the default)"
        if typical > 0:
            ranges += (f", or between {0.01 * typical:.3g} and {100 * typical:.3g} with "
                       "sigma_mode='absolute'")
        raise RDXInputError(
            f"RBF CKA: sigma={float(sigma):g} (sigma_mode={sigma_mode!r}) makes the bandwidth "
            f"of {name} σ = {s:.3g}, at which 1/σ² {'overflows' if s < 1 else 'underflows'} "
            f"float64: every kernel value exp(−d²/(2σ²)) would be "
            f"{'0 (the identity kernel)' if s < 1 else '1 (a constant kernel)'}. The median "
            f"distance between images of {name} is {typical:.3g}; use {ranges}.")
    return s


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
    check_pairwise_memory("the RBF kernel", Z.shape[0], _ONE_KERNEL, Z.device,
                          matrices=_ONE_KERNEL_WHAT)
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
    check_pairwise_memory("HSIC", n, 16.0, K.device, matrices="centred copies of K and L")
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
    check_pairwise_memory("kernel CKA", n, 16.0, K.device, matrices="centred copies of K "
                          "and L")
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


#: Peak bytes per n² of one centred RBF kernel (float64 n×n, plus the n²/2 float64 buffer of
#: the median bandwidth while it is built) and of a CKA of two (one kernel kept while the
#: second is built).
_ONE_KERNEL = 12.0
_TWO_KERNELS = 20.0
_ONE_KERNEL_WHAT = "an n×n float64 kernel and the n²/2 pairwise distances of its bandwidth"
_TWO_KERNELS_WHAT = ("two n×n float64 kernels and the n²/2 pairwise distances of a "
                     "bandwidth")


def _rbf_inputs(X: Any, Y: Any, sigma: Any, sigma_mode: Any, debiased: Any,
                bytes_per_n2: float = _TWO_KERNELS
                ) -> tuple[torch.Tensor, torch.Tensor, bool, float, str, bool]:
    if not isinstance(debiased, (bool, np.bool_)):
        raise RDXInputError(f"RBF CKA: debiased must be True or False, got {debiased!r}.")
    X, Y, numpy_in = _as_pair(X, Y, min_n=4 if debiased else 2)
    sigma = check_positive(sigma, "sigma", what="RBF CKA")
    check_choice(sigma_mode, "sigma_mode", SIGMA_MODES, what="RBF CKA")
    check_pairwise_memory("RBF CKA", X.shape[0], bytes_per_n2, X.device,
                          matrices=_TWO_KERNELS_WHAT if bytes_per_n2 == _TWO_KERNELS
                          else _ONE_KERNEL_WHAT)
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
    Memory: two n×n float64 matrices (1.6 GB at n = 10 000) plus row-block temporaries and
    the n²/2 distances of the median bandwidth (about 20·n² bytes at the peak: 200 GB at
    n = 100 000). Refused with that figure and a subsample size when it does not fit.
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
    Z, _, _, sigma, sigma_mode, debiased = _rbf_inputs(Z, Z, sigma, sigma_mode, debiased,
                                                       _ONE_KERNEL)
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
    """The absolute σ that :func:`rbf_cka` uses for X and for Y (for reporting)."""
    X, Y, _, sigma, sigma_mode, _ = _rbf_inputs(X, Y, sigma, sigma_mode, False, _ONE_KERNEL)
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
        self._kernels: _KernelCKAPrepared | None = None

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
                    self._kernels = _KernelCKAPrepared(
                        _center_kernel(self.X @ self.X.T, self.debiased),
                        _center_kernel(self.Y @ self.Y.T, self.debiased), self.debiased,
                        "use more images.")
            return self._kernels.permuted(perm)
        p = torch.as_tensor(perm, device=self.Y.device)
        return self._cross(self.Y[p], p)
