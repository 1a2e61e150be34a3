"""SVCCA similarity (Raghu et al. 2017): SVD truncation, then mean canonical correlation;
PWCCA (Morcos et al. 2018, :func:`pwcca`): the projection-weighted mean.

Steps, for each representation separately: centre the columns, take the SVD
``Zc = U S Vᵀ`` and keep the r leading directions that explain a fraction ``keep`` (default
0.99) of the variance, i.e. the smallest r with ``Σ_{i≤r} s_i² ≥ keep · Σ_i s_i²`` (directions
with numerically zero singular values are never kept). The kept part ``U_r S_r`` spans the
column space of ``U_r``. Then CCA between the two truncated representations: the canonical
correlations are the cosines of the principal angles between the two subspaces, i.e. the
singular values ``ρ_1 ≥ … ≥ ρ_m`` of ``Q_Xᵀ Q_Y`` for orthonormal bases Q (m = min(r_X, r_Y)).
SVCCA is their mean, ``(1/m) Σ ρ_i`` ∈ [0, 1]; higher is more similar.

**Averaging convention** (``average=``). ``"min"`` (default) divides by m = min(r_X, r_Y),
as Google's ``cca_core`` does: a representation scores 1.0 against any subspace of itself
(pixels against their own first 10 principal components score 1.0, though the PCA drops
most of the pixels' directions). ``"geometric"`` divides by √(r_X·r_Y) instead, which is
netrep's CCA score (``LinearMetric(alpha=0)``: the cosine of its angular distance is
``Σρ_i / √(r_X r_Y)`` for full-rank inputs), and penalises the directions that one input
has and the other lacks: 10 correlations of 1 with r_X = 40 give √(10/40) = 0.5.

This equals Google's ``cca_core.get_cca_similarity(...)["mean"]`` on the SVD-reduced
activations (which whitens covariances instead of taking principal angles; same numbers up
to its ε regularisation) with the variance rule above. Notes: the 99 % rule uses the
*variance* (s²) as the SVCCA paper does — ReSi's copy compares a cumulative fraction against
``threshold × total variance``, which keeps a single direction, and the authors' tutorial
keeps a fixed 20 — and the platonic-rep code uses a fixed ``cca_dim=10`` with randomised
SVD. CCA overfits when r_X + r_Y approaches n (correlations tend to 1 for any inputs), so
use n well above the kept dimensions.

Invariant to orthogonal transforms, isotropic scaling and translation (not to general
invertible linear maps, because of the truncation). Float64; the SVD is taken from the
eigendecomposition of the smaller of ``ZcᵀZc`` and ``ZcZcᵀ`` (O(n·d·min(n, d))), and the
kept basis is re-orthonormalised by a QR.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .inputs import as_tensor_pair, center_columns, check_choice
from .names import SVCCA_AVERAGES


def _check_keep(keep: Any) -> float:
    bad = RDXInputError(f"SVCCA: keep must be a fraction of variance in (0, 1], got {keep!r}.")
    if isinstance(keep, (bool, np.bool_, str, bytes)):
        raise bad
    try:
        v = float(keep)
    except (TypeError, ValueError):
        raise bad from None
    if not (0.0 < v <= 1.0):
        raise bad
    return v


def svd_basis(Z: torch.Tensor, keep: float) -> torch.Tensor:
    """Orthonormal basis (n × r) of the leading left singular vectors of the centred ``Z``
    that explain a fraction ``keep`` of its variance (float64)."""
    Zc = center_columns(Z)
    n, d = Zc.shape
    if d <= n:
        evals, V = torch.linalg.eigh(Zc.T @ Zc)          # ascending
    else:
        evals, V = torch.linalg.eigh(Zc @ Zc.T)
    evals, V = evals.flip(0).clamp_min(0.0), V.flip(1)
    tol = float(evals[0]) * max(n, d) * float(torch.finfo(torch.float64).eps)
    valid = int((evals > tol).sum())
    frac = torch.cumsum(evals[:valid], 0) / evals.sum()
    r = int(torch.searchsorted(frac, torch.tensor(keep * (1 - 1e-12), dtype=frac.dtype,
                                                  device=frac.device))) + 1
    r = min(max(r, 1), valid)
    U = Zc @ V[:, :r] if d <= n else V[:, :r]
    Q, _ = torch.linalg.qr(U, mode="reduced")
    return Q


class _SVCCAPrepared:
    """Truncated bases kept for repeated evaluation on ``Y[perm]``."""

    def __init__(self, X: Any, Y: Any, keep: Any, average: Any = "min"):
        keep = _check_keep(keep)
        self.average = check_choice(average, "average", SVCCA_AVERAGES, what="SVCCA")
        X, Y, _ = as_tensor_pair(X, Y, what="SVCCA", min_n=4)
        with torch.no_grad():
            self.Qx, self.Qy = svd_basis(X.detach(), keep), svd_basis(Y.detach(), keep)
            self.dims = (self.Qx.shape[1], self.Qy.shape[1])
            rx, ry = self.dims
            self._denominator = (float(min(rx, ry)) if self.average == "min"
                                 else float(np.sqrt(float(rx) * ry)))
            self.value = self._value(self.Qy)

    def _value(self, Qy: torch.Tensor) -> float:
        rho = torch.linalg.svdvals(self.Qx.T @ Qy).clamp(0.0, 1.0)
        return float(rho.sum()) / self._denominator

    def permuted(self, perm: np.ndarray) -> float:
        with torch.no_grad():
            return self._value(self.Qy[torch.as_tensor(perm, device=self.Qy.device)])


def _prepare_svcca(X: Any, Y: Any, *, keep: float = 0.99,
                   average: str = "min") -> _SVCCAPrepared:
    return _SVCCAPrepared(X, Y, keep, average)


def svcca(X: Any, Y: Any, *, keep: float = 0.99, average: str = "min") -> float:
    """SVCCA: mean canonical correlation after keeping ``keep`` of each input's variance.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images (rows).
    keep : float in (0, 1], default=0.99
        Fraction of variance (sum of squared singular values) kept by the SVD step.
    average : {"min", "geometric"}, default="min"
        Divide the sum of the canonical correlations by min(r_X, r_Y) (Google's
        ``cca_core``) or by √(r_X·r_Y) (netrep's CCA score); module docstring.

    Returns
    -------
    float in [0, 1]; higher is more similar.
    """
    return _SVCCAPrepared(X, Y, keep, average).value


def canonical_correlations(X: Any, Y: Any, *, keep: float = 0.99) -> np.ndarray:
    """All canonical correlations ρ_1 ≥ … ≥ ρ_m of the SVD-truncated inputs (for reports)."""
    p = _SVCCAPrepared(X, Y, keep)
    with torch.no_grad():
        return torch.linalg.svdvals(p.Qx.T @ p.Qy).clamp(0.0, 1.0).cpu().numpy()


class _PWCCAPrepared:
    """PWCCA (Morcos et al. 2018): the canonical correlations weighted by how much of one
    input's neurons each canonical variate accounts for.

    Both inputs are column-centred and reduced to orthonormal bases of their column spaces
    (:func:`svd_basis` with ``keep=1``: numerically zero directions dropped). The SVD
    ``Q_XᵀQ_Y = U diag(ρ) Vᵀ`` gives the m = min(r_X, r_Y) canonical correlations ρ_i and
    the unit-norm canonical variates ``h_i = Q_X u_i`` of X (``Q_Y v_i`` of Y). The
    weights come from the input with fewer neurons (columns with non-zero variance; X on
    a tie), as in Google's ``pwcca.compute_pwcca``: ``α_i = Σ_j |⟨h_i, z_j⟩|`` over its
    centred neuron columns z_j, and ``PWCCA = Σ_i α_i ρ_i / Σ_i α_i`` ∈ [0, 1]. This is
    ``compute_pwcca`` on centred activations (where its added-back means vanish; it is
    translation invariant here, unlike there) without its ε regularisation. Invariant to
    isotropic scaling, translation and permutations of the neurons, not to rotations of
    them (the weights are sums of absolute projections onto the neurons). Not symmetric.
    """

    def __init__(self, X: Any, Y: Any):
        X, Y, _ = as_tensor_pair(X, Y, what="PWCCA", min_n=4)
        with torch.no_grad():
            Xc, Yc = center_columns(X.detach()), center_columns(Y.detach())
            self.Qx, self.Qy = svd_basis(Xc, 1.0), svd_basis(Yc, 1.0)
            live = [int((Z.abs().amax(dim=0) > 0).sum()) for Z in (Xc, Yc)]
            self.x_side = live[0] <= live[1]
            self.Z = Xc if self.x_side else Yc
            self.value = self._value(self.Qy, self.Z)

    def _value(self, Qy: torch.Tensor, Z: torch.Tensor) -> float:
        U, rho, Vh = torch.linalg.svd(self.Qx.T @ Qy, full_matrices=False)
        H = self.Qx @ U if self.x_side else Qy @ Vh.T          # n × m canonical variates
        alpha = (H.T @ Z).abs().sum(dim=1)
        total = float(alpha.sum())
        if not total > 0:
            raise RDXInputError("PWCCA is undefined for these inputs: no canonical variate "
                                "projects onto the neurons (constant inputs?).")
        return float((alpha * rho.clamp(0.0, 1.0)).sum()) / total

    def permuted(self, perm: np.ndarray) -> float:
        p = torch.as_tensor(perm, device=self.Qy.device)
        with torch.no_grad():
            return self._value(self.Qy[p], self.Z if self.x_side else self.Z[p])


def _prepare_pwcca(X: Any, Y: Any) -> _PWCCAPrepared:
    return _PWCCAPrepared(X, Y)


def pwcca(X: Any, Y: Any) -> float:
    """Projection-weighted CCA (Morcos et al. 2018; :class:`_PWCCAPrepared`).

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images (rows). Use n well above p + q: like all
        CCA, it tends to 1 for any inputs as p + q approaches n.

    Returns
    -------
    float in [0, 1]; higher is more similar. Not symmetric: the weights come from the
    input with fewer neurons (X when they have as many).
    """
    return _PWCCAPrepared(X, Y).value
