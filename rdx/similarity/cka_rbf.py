"""CKA with RBF kernels: the kernel, its bandwidth, and the measure (debiased or biased HSIC,
:mod:`rdx.similarity.cka_kernel`).

**RBF kernel.** ``K_ij = exp(−‖xᵢ − xⱼ‖² / (2σ²))`` needs the n×n matrices (float64; about
0.8 GB each at n = 10 000). Above the available memory (or ``RDX_MEMORY_LIMIT_GB``) the RBF
measures refuse before computing, with the figure and the largest n that would fit
(:func:`rdx.similarity.memory.check_pairwise_memory`; RSA does the same).

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

from ..errors import RDXInputError
from .cka_kernel import (KernelCKAPrepared, center_kernel, check_self_hsic, frobenius_inner,
                         needs_grad)
from .inputs import (as_tensor_pair, center_columns, check_choice, check_positive,
                     symmetric_gram)
from .memory import check_pairwise_memory
from .names import SIGMA_MODES   # the RBF kernel's bandwidth modes (module docstring)

#: Parameters of the consistency paper's "CKA RBF 0.4" (thingsvision 2.6.10): an absolute
#: bandwidth on L2-normalised features, debiased HSIC. Normalise the rows first
#: (``X / ‖X‖`` per row) or the numbers mean something else.
SIMCONS_RBF_PRESET: dict[str, Any] = {"sigma": 0.4, "sigma_mode": "absolute", "debiased": True}


def squared_distances(Z: torch.Tensor) -> torch.Tensor:
    """n×n float64 squared Euclidean distances (exactly symmetric, zero diagonal, ≥ 0).

    Computed as ``|x|² + |y|² − 2x·y`` on column-centred data (exact translation invariance
    and far less cancellation than on raw features). Without autograd the matrix is built in
    place from upper-triangle GEMM strips; with autograd an out-of-place version is used.
    """
    Zc = center_columns(Z.to(torch.float64))
    sq = (Zc * Zc).sum(dim=1)
    if needs_grad(Zc):
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
    if needs_grad(D):
        return torch.exp(D * (-0.5 / s ** 2)), s
    return D.mul_(-0.5 / s ** 2).exp_(), s


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
    X, Y, numpy_in = as_tensor_pair(X, Y, what="CKA", min_n=4 if debiased else 2)
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
    K = torch.exp(D * (-0.5 / s ** 2)) if needs_grad(D) else D.mul_(-0.5 / s ** 2).exp_()
    return center_kernel(K, debiased), s


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
    hkl, hkk, hll = frobenius_inner(Kc, Lc), frobenius_inner(Kc, Kc), frobenius_inner(Lc, Lc)
    check_self_hsic(hkk, hll, debiased=debiased, hint=_RBF_HINT)
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
        h = frobenius_inner(Kc, Kc)
    if not float(h) > 0:
        raise RDXInputError(f"{'debiased' if debiased else 'biased'} RBF CKA is undefined for "
                            f"{name}: the HSIC of its kernel with itself is not positive "
                            f"({float(h):.3g}); {_RBF_HINT}")
    return RBFKernelState(Kc, h, s)


def cka_of_states(a: RBFKernelState, b: RBFKernelState) -> float:
    """Kernel CKA of two representations from their :class:`RBFKernelState`."""
    return float(frobenius_inner(a.Kc, b.Kc) / torch.sqrt(a.h * b.h))


def rbf_bandwidths(X: Any, Y: Any, *, sigma: float = 1.0,
                   sigma_mode: str = "median_fraction") -> tuple[float, float]:
    """The absolute σ that :func:`rbf_cka` uses for X and for Y (for reporting)."""
    X, Y, _, sigma, sigma_mode, _ = _rbf_inputs(X, Y, sigma, sigma_mode, False, _ONE_KERNEL)
    return (rbf_bandwidth(squared_distances(X.detach()), sigma, sigma_mode, name="X"),
            rbf_bandwidth(squared_distances(Y.detach()), sigma, sigma_mode, name="Y"))


def _prepare_rbf_cka(X: Any, Y: Any, *, sigma: float = 1.0,
                     sigma_mode: str = "median_fraction",
                     debiased: bool = True) -> KernelCKAPrepared:
    X, Y, _, sigma, sigma_mode, debiased = _rbf_inputs(X, Y, sigma, sigma_mode, debiased)
    with torch.no_grad():
        Kc, _ = _rbf_centered(X.detach(), sigma, sigma_mode, debiased, "X")
        Lc, _ = _rbf_centered(Y.detach(), sigma, sigma_mode, debiased, "Y")
    return KernelCKAPrepared(Kc, Lc, debiased, _RBF_HINT)
