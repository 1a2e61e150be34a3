"""The far-pair sketch of large-n RDX: a Nyström model, from landmark images, of the pairs
that the union K-NN graph (:mod:`rdx.method.knn_graph`) leaves out.

The far part ``F = S − 11ᵀ − C_s`` of the symmetrised affinity is known exactly in the
columns of ``m`` landmark images L (:func:`far_columns`, from the exact ranks that the graph
pass records); ``F ≈ F[:, L] W⁺ F[L, :]``, ``W = F[L, L]``, truncated to the
:func:`sketch_rank` largest-|λ| eigenpairs of ``W``, gives ``G Λ⁻¹ Gᵀ`` with ``G = F[:, L]
V_r`` (:class:`FarSketch`). Why the far pairs matter and how the sketch enters the fit:
:mod:`rdx.method.knn_fit`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graphs import DIRECTION_SIGN
from .knn_graph import UnionGraph

#: Most eigenpairs of the landmark block kept by the far-pair sketch (:func:`sketch_rank`).
SKETCH_MAX_RANK = 100
#: Eigenvalues of the landmark block below this fraction of the largest |λ| are rounding.
_SKETCH_EIG_RTOL = 1e-9


def sketch_rank(n_landmarks: int) -> int:
    """Eigenpairs kept of the landmark block: ``min(100, max(1, m // 10))``. The untruncated
    pseudo-inverse amplifies the block's many near-zero eigenvalues (partitions unrelated to
    the dense one in trials); a tenth of m kept the validation partitions stable."""
    return int(min(SKETCH_MAX_RANK, max(1, n_landmarks // 10)))


def choose_landmarks(n: int, n_landmarks: int, seed: int) -> np.ndarray:
    """``min(n_landmarks, n)`` distinct images drawn uniformly with a local generator, sorted."""
    m = int(min(n_landmarks, n))
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


def far_columns(graph: UnionGraph, beta: float, direction: str, diff_scale: float = 1.0
                ) -> np.ndarray:
    """``F[:, L]`` (n × m float32): the symmetrised affinity minus 1 of every pair (i, L[c])
    off the graph, ``½(e^{±β d(i,L_c)} − 1) + ½(e^{±β d(L_c,i)} − 1)`` with each half 0 where
    that ordered pair is in ``E`` — exactly the part of ``S − 11ᵀ − C_s`` in these columns.
    ``diff_scale``: the divisor of ``normalize_diff``."""
    c = DIRECTION_SIGN[direction] * beta / diff_scale
    n, m = graph.far_out.shape
    out = np.empty((n, m), dtype=np.float32)
    step = max(1, 2**22 // max(m, 1))
    for a in range(0, n, step):
        b = min(n, a + step)
        half = np.nan_to_num(np.expm1(graph.far_out[a:b].astype(np.float64) * c), nan=0.0)
        half += np.nan_to_num(np.expm1(graph.far_in[:, a:b].T.astype(np.float64) * c), nan=0.0)
        out[a:b] = 0.5 * half
    return out


@dataclass
class FarSketch:
    """Nyström model ``G diag(inv) Gᵀ`` of the far part ``F = S − 11ᵀ − C_s`` (the pairs off
    the graph), from its landmark columns: ``F ≈ F[:, L] W⁺ F[L, :]`` with ``W = F[L, L]``
    truncated to its ``rank`` largest-|λ| eigenpairs, ``G = F[:, L] V_r``, ``inv = 1/λ_r``."""

    G: np.ndarray
    inv: np.ndarray

    @property
    def rank(self) -> int:
        return int(len(self.inv))

    def matmat(self, V: np.ndarray) -> np.ndarray:
        return self.G @ (self.inv[:, None] * (self.G.T @ V))


def far_sketch(F_cols: np.ndarray, landmarks: np.ndarray, rank: int | None
               ) -> FarSketch | None:
    """:class:`FarSketch` from ``F[:, L]`` (``rank`` None: every eigenpair above rounding —
    the exact Nyström formula, for tests); None when the landmark block is zero (no far
    pair among the landmarks, e.g. K = n − 1)."""
    W = F_cols[landmarks].astype(np.float64)
    W = 0.5 * (W + W.T)      # symmetric by construction; removes rounding asymmetry
    lam, V = np.linalg.eigh(W)
    top = float(np.abs(lam).max()) if len(lam) else 0.0
    if top == 0.0:
        return None
    order = np.argsort(-np.abs(lam), kind="stable")
    if rank is not None:
        order = order[:rank]
    order = order[np.abs(lam[order]) > _SKETCH_EIG_RTOL * top]
    Vr = V[:, order]
    G = np.empty((F_cols.shape[0], len(order)), dtype=np.float64)
    step = max(1, 2**22 // max(F_cols.shape[1], 1))
    for a in range(0, F_cols.shape[0], step):
        G[a:a + step] = F_cols[a:a + step].astype(np.float64) @ Vr
    return FarSketch(G, 1.0 / lam[order])
