"""Binary Success Rate (BSR), total signed difference (TSD) and ties (EQ) — spec §4.2.

For every grid ``G`` of a direction and every ordered pair ``(a, b)``, ``a ≠ b``, of its
images, compare a pairwise dissimilarity ``δ`` in the two (original, unmapped)
representations:

* ``a_over_b`` (concept tight in A): success if ``δ_A(a,b) < δ_B(a,b)``; gap ``δ_B − δ_A``;
* ``b_over_a`` (tight in B): success if ``δ_A(a,b) > δ_B(a,b)``; gap ``δ_A − δ_B``;
* EQ counts ``δ_A = δ_B``.

``BSR = successes / pairs``, ``TSD = Σ gap / pairs`` and ``EQ = ties / pairs``, pooled over
the direction's grids; ``mean`` averages the two directions. Dissimilarities:

* ``rank``: 1-based neighbour rank of ``b`` in ``a``'s list (asymmetric; ties by index);
* ``max_normalized_euclidean``: ``D(a,b) / max D``;
* ``local_scaling``: ``D(a,b)² / (σ(a)σ(b))``, σ = distance to the 7th neighbour, each
  model with its own distances (the original's LSED mixed the two models; spec §1.4).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from .._validation import as_representation, check_pair
from ..errors import RDXInputError
from ..method.geometry import (max_squared_distance, ranks_of_rows,
                               squared_distances_between, to_device_centered)

DISSIMILARITIES = ("rank", "max_normalized_euclidean", "local_scaling")
_DIRECTION_SIGN = {"a_over_b": 1.0, "b_over_a": -1.0}  # gap = sign · (δ_B − δ_A)


class _PairDissimilarity:
    """δ restricted to a set of images, for one representation (caches global stats)."""

    def __init__(self, X: np.ndarray, kind: str, sigma_neighbor: int = 7):
        if kind not in DISSIMILARITIES:
            raise RDXInputError(f"unknown dissimilarity {kind!r}; use one of {DISSIMILARITIES}")
        self.X = to_device_centered(X, torch.device("cpu"))
        self.kind = kind
        self.sigma_neighbor = sigma_neighbor
        self._max_d = None

    def __call__(self, grid: Sequence[int]) -> np.ndarray:
        g = np.asarray(grid, dtype=np.int64)
        if self.kind == "rank":   # same keys and tie rule as the fit's rank matrix, 1-based
            return ranks_of_rows(self.X, g)[:, g].astype(np.float64) + 1.0
        d2 = squared_distances_between(self.X, g)            # |G| × n
        if self.kind == "max_normalized_euclidean":
            if self._max_d is None:
                self._max_d = float(np.sqrt(max_squared_distance(self.X)))
            return np.sqrt(d2[:, g].astype(np.float64)) / self._max_d
        n = d2.shape[1]
        if not 0 < self.sigma_neighbor < n:
            raise RDXInputError(f"sigma_neighbor={self.sigma_neighbor} must be in 1..{n - 1}")
        sigma = np.sqrt(np.partition(d2, self.sigma_neighbor, axis=1)[:, self.sigma_neighbor]
                        .astype(np.float64))
        if (sigma == 0).any():
            raise RDXInputError("local_scaling dissimilarity undefined: an image has at least "
                                f"{self.sigma_neighbor} exact duplicates (zero local scale).")
        return d2[:, g].astype(np.float64) / sigma[:, None] / sigma[None, :]


def bsr_scores(A: np.ndarray, B: np.ndarray, grids: Mapping[str, Sequence[Sequence[int]]], *,
               dissimilarity: str = "rank", sigma_neighbor: int = 7) -> dict:
    """BSR/TSD/EQ per direction and their mean.

    Parameters
    ----------
    A, B : (n, d_A), (n, d_B) arrays
        The original representations (same images, same order).
    grids : {"a_over_b": [[i, ...], ...], "b_over_a": [...]}
        Image indices of each explanation grid (no-change group excluded by the caller).
    dissimilarity : one of ``DISSIMILARITIES``

    Returns
    -------
    dict
        ``{direction: {"bsr", "tsd", "eq", "n_pairs"}, "mean": {"bsr", "tsd"}}``; scores are
        NaN for a direction without any pair.
    """
    A = as_representation(A, "A")
    B = as_representation(B, "B")
    check_pair(A, B)
    n = A.shape[0]
    da = _PairDissimilarity(A, dissimilarity, sigma_neighbor)
    db = _PairDissimilarity(B, dissimilarity, sigma_neighbor)
    out: dict = {}
    for direction, dir_grids in grids.items():
        if direction not in _DIRECTION_SIGN:
            raise RDXInputError(f"unknown direction {direction!r}; use 'a_over_b' or 'b_over_a'")
        succ = eq = pairs = 0
        gap = 0.0
        for grid in dir_grids:
            g = np.asarray(grid, dtype=np.int64)
            if g.size and (g.min() < 0 or g.max() >= n):
                raise RDXInputError(f"grid {g.tolist()} has indices outside 0..{n - 1}")
            if len(g) < 2:
                continue
            off = ~np.eye(len(g), dtype=bool)
            signed = (_DIRECTION_SIGN[direction] * (db(g) - da(g)))[off]
            succ += int((signed > 0).sum())
            eq += int((signed == 0).sum())
            gap += float(signed.sum())
            pairs += int(off.sum())
        nan = float("nan")
        out[direction] = {"bsr": succ / pairs if pairs else nan, "tsd": gap / pairs if pairs else nan,
                          "eq": eq / pairs if pairs else nan, "n_pairs": pairs}
    dirs = [d for d in ("a_over_b", "b_over_a") if d in out]
    out["mean"] = {k: float(np.mean([out[d][k] for d in dirs])) if dirs else float("nan")
                   for k in ("bsr", "tsd")}
    return out
