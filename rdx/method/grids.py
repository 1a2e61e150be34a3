"""Which images of a cluster to show in its explanation grid.

All strategies work in the representation where the concept is tight (A for ``a_over_b``,
B for ``b_over_a``) and return at most ``size`` image indices; all but
``maximize_total_euc_neighborhood_affinity`` show members only. Distance ties are broken by
image index, so grids are deterministic.

* ``maximize_total_neighborhood_affinity`` (default): for each member ``i`` take its
  neighbourhood ``N_i`` = the ``min(|C|, size)`` nearest members (``i`` first); score
  ``S_i = Σ_{a,b∈N_i} A[a,b]`` with the direction's unsymmetrised affinity ``A``; show
  ``N_i`` of the best anchor (ties, within 1e-9 relative: the smallest index), anchor
  first, then by distance from it.
* ``maximize_total_euc_neighborhood_affinity``: the same score, but ``N_i`` are the
  ``min(n, size)`` nearest of *all* n images (``i`` first); anchors are members, the grid
  may show non-members (images near the concept that the clustering put elsewhere).
* ``centroid``: members nearest to the cluster mean. (The original's ``centroid`` searched
  all n images, so its grids could show non-members; ours never does.)
* ``max_affinity``: members with the largest mean affinity to the rest of the cluster.
* ``random``: a seeded uniform sample of members.
"""
from __future__ import annotations

import numpy as np

from ..errors import RDXInputError
from . import arrays as A
from .arrays import Array
from .clustering import affinity_block, rows_per_chunk
from .geometry import squared_distances_between
from .graphs import DIRECTION_SIGN
from .ranks import LOW32, neighbor_keys_numpy

#: Relative tolerance under which two neighbourhood scores count as tied.
_SCORE_RTOL = 1e-9

GRID_STRATEGIES = ("maximize_total_neighborhood_affinity",
                   "maximize_total_euc_neighborhood_affinity", "centroid", "max_affinity",
                   "random")


def _nearest_members(X: Array, members: np.ndarray, local_rows: np.ndarray, s: int
                     ) -> np.ndarray:
    """For members ``members[local_rows]``: local indices of their ``s`` nearest members,
    ordered by (distance, index) with the member itself first."""
    d2 = squared_distances_between(X, members[local_rows], members)
    keys = neighbor_keys_numpy(d2, np.asarray(local_rows, dtype=np.int64))
    if s < keys.shape[1]:
        keys = np.partition(keys, s - 1, axis=1)[:, :s]
    keys.sort(axis=1)
    return keys & LOW32


def _nearest_images(X: Array, anchors: np.ndarray, s: int) -> np.ndarray:
    """For images ``anchors``: indices of their ``s`` nearest among all images, ordered by
    (distance, index) with the anchor itself first."""
    d2 = squared_distances_between(X, anchors)
    keys = neighbor_keys_numpy(d2, anchors)
    if s < keys.shape[1]:
        keys = np.partition(keys, s - 1, axis=1)[:, :s]
    keys.sort(axis=1)
    return keys & LOW32


def _best_neighborhood(chunks, diff: Array, c: float) -> np.ndarray:
    """The neighbourhood (global ids) with the largest affinity sum ``Σ exp(c·diff)`` over
    its block; ``chunks`` yields arrays of neighbourhoods (rows, anchor first)."""
    scores, nbrs = [], []
    for nb in chunks:
        g = A.like(nb, diff)
        vals = A.astype(diff[g[:, :, None], g[:, None, :]], "float64")      # chunk × s × s
        vals *= c
        scores.append(A.host(A.exp_(vals)).sum(axis=(1, 2)))
        nbrs.append(nb)
    score = np.concatenate(scores)
    # Equal neighbourhoods (e.g. when s = |C|) have equal scores up to summation order:
    # treat near-equal scores as ties and take the first anchor, by index.
    best = int(np.flatnonzero(score >= score.max() * (1 - _SCORE_RTOL))[0])
    return np.concatenate(nbrs)[best]


def select_grid(members: np.ndarray, X: Array, diff: Array, *, beta: float,
                direction: str, size: int = 9,
                strategy: str = "maximize_total_neighborhood_affinity",
                rng: np.random.Generator | None = None) -> list[int]:
    """Image indices shown for one cluster (see module docstring)."""
    members = np.sort(np.asarray(members, dtype=np.int64))
    m = len(members)
    if m == 0:
        return []
    if strategy == "maximize_total_euc_neighborhood_affinity":
        n = X.shape[0]
        step = rows_per_chunk(n)  # bounds the chunk × n distance block
        chunks = (_nearest_images(X, members[a:a + step], min(n, size))
                  for a in range(0, m, step))
        return _best_neighborhood(chunks, diff, DIRECTION_SIGN[direction] * beta).tolist()
    s = min(m, size)
    if m == 1:
        return [int(members[0])]
    if strategy == "maximize_total_neighborhood_affinity":
        step = rows_per_chunk(m)  # bounds the chunk × m distance block
        chunks = (members[_nearest_members(X, members, np.arange(a, min(m, a + step)), s)]
                  for a in range(0, m, step))
        return _best_neighborhood(chunks, diff, DIRECTION_SIGN[direction] * beta).tolist()
    if strategy == "centroid":
        Xm = A.host(A.take(X, members))
        d2 = ((Xm - Xm.mean(0, keepdims=True)) ** 2).sum(1).astype(np.float64)
        return members[np.lexsort((members, d2))[:s]].tolist()
    if strategy == "max_affinity":
        step = rows_per_chunk(m)
        score = np.concatenate([
            A.host(affinity_block(diff, members[a:a + step], members, beta, direction))
            .mean(1, dtype=np.float64) for a in range(0, m, step)])
        return members[np.lexsort((members, -score))[:s]].tolist()
    if strategy == "random":
        rng = rng if rng is not None else np.random.default_rng(0)
        return rng.choice(members, size=s, replace=False).tolist()
    raise RDXInputError(f"unknown grid strategy {strategy!r}; use one of {GRID_STRATEGIES}")
