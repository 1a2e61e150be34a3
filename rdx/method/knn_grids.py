"""Grids of large-n RDX: the rules of :mod:`rdx.method.grids` on the sparse affinity.

A member's neighbourhood of the ``grid_size`` nearest members is read from its K-NN list in
the tight model when that list holds enough members (otherwise the distances to the
cluster's members are computed), and affinities of grid pairs are ``1 + C`` plus the far-pair
sketch's entries.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
import torch

from ..errors import RDXInputError
from .geometry import squared_distances_between
from .grids import select_grid
from .knn_sketch import FarSketch
from .ranks import LOW32, neighbor_keys_numpy

#: Relative tolerance under which two neighbourhood scores count as tied (as in grids.py).
_SCORE_RTOL = 1e-9


def _lookup(C: scipy.sparse.csr_matrix, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``C[a, b]`` elementwise (0 off the union graph), float64."""
    return np.asarray(C[a.ravel(), b.ravel()], dtype=np.float64).reshape(a.shape)


def _nearest_members(X: torch.Tensor, members: np.ndarray, local_rows: np.ndarray, s: int,
                     neighbors: np.ndarray, is_member: np.ndarray) -> np.ndarray:
    """Global ids of the ``s`` nearest members of ``members[local_rows]`` (self first, then
    by (distance, index)): from the K-NN lists where they hold ≥ s − 1 members, else from
    the distances to all members."""
    rows = members[local_rows]
    out = np.empty((len(rows), s), dtype=np.int64)
    out[:, 0] = rows
    if s == 1:
        return out
    nb = neighbors[rows].astype(np.int64)
    mask = is_member[nb]
    ok = mask.sum(axis=1) >= s - 1
    if ok.any():
        pos = np.argsort(~mask[ok], axis=1, kind="stable")[:, :s - 1]
        out[ok, 1:] = np.take_along_axis(nb[ok], pos, axis=1)
    todo = np.flatnonzero(~ok)
    step = max(1, (64 * 2**20) // (8 * len(members)))
    for a in range(0, len(todo), step):
        t = todo[a:a + step]
        d2 = squared_distances_between(X, rows[t], members)
        keys = neighbor_keys_numpy(d2, np.asarray(local_rows)[t])
        if s < keys.shape[1]:
            keys = np.partition(keys, s - 1, axis=1)[:, :s]
        keys.sort(axis=1)
        out[t] = members[keys & LOW32]
    return out


def select_grid_sparse(members: np.ndarray, X: torch.Tensor, neighbors: np.ndarray,
                       C: scipy.sparse.csr_matrix, *, size: int = 9,
                       strategy: str = "maximize_total_neighborhood_affinity",
                       rng: np.random.Generator | None = None,
                       sketch: FarSketch | None = None) -> list[int]:
    """The grid of one cluster, as :func:`rdx.method.grids.select_grid` with the affinity
    ``A = 1 + C [+ sketch]`` of the K-NN graph (see the module docstring). The sketch models
    the symmetrised far part: exact for the default strategy, whose scores sum over
    symmetric sets of pairs; ``max_affinity``'s per-image sums read it where the dense path
    reads the unsymmetrised affinity."""
    members = np.sort(np.asarray(members, dtype=np.int64))
    m = len(members)
    if m == 0:
        return []
    s = min(m, size)
    if m == 1:
        return [int(members[0])]
    if strategy in ("centroid", "random"):   # need no affinities
        return select_grid(members, X, None, beta=0.0, direction="a_over_b", size=size,
                           strategy=strategy, rng=rng)
    if strategy == "max_affinity":
        sub = C[members][:, members]
        total = np.asarray(sub.sum(axis=1), dtype=np.float64).ravel()
        if sketch is not None:
            total += sketch.G[members] @ (sketch.inv * sketch.G[members].sum(axis=0))
        score = 1.0 + total / m
        return members[np.lexsort((members, -score))[:s]].tolist()
    if strategy != "maximize_total_neighborhood_affinity":
        raise RDXInputError(f"unknown grid strategy {strategy!r}")
    is_member = np.zeros(C.shape[0], dtype=bool)
    is_member[members] = True
    step = max(1, (16 * 2**20) // (8 * s * s))
    scores, nbrs = [], []
    for a in range(0, m, step):
        local = np.arange(a, min(m, a + step))
        N = _nearest_members(X, members, local, s, neighbors, is_member)   # chunk × s
        vals = _lookup(C, np.repeat(N, s, axis=1), np.tile(N, (1, s)))
        score = s * s + vals.sum(axis=1)
        if sketch is not None:     # Σ_{a,b ∈ N} (G Λ⁻¹ Gᵀ)[a, b] = g Λ⁻¹ gᵀ, g = Σ_a G[a]
            g = sketch.G[N].sum(axis=1)
            score += (g * sketch.inv * g).sum(axis=1)
        scores.append(score)
        nbrs.append(N)
    score = np.concatenate(scores)
    best = int(np.flatnonzero(score >= score.max() * (1 - _SCORE_RTOL))[0])
    return np.concatenate(nbrs)[best].tolist()
