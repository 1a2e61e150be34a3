"""Clusters of a difference-affinity graph: ordering, the no-change group, greedy selectors.

Spectral clustering itself lives in :mod:`rdx.method.spectral`. This module holds what
turns labels into explanations:

* mean within-cluster affinity ``m_c = mean_{i,j∈c} A[i,j]`` (unsymmetrised, diagonal
  included) and the relabelling by ascending ``m_c``, so that label 0 is the lowest-affinity
  cluster — the "no-change" (null) group — and the last label the strongest difference;
* RDX v2's filter (:func:`cluster_rank_labels`): every cluster with ``m_c`` below a threshold
  joins the no-change group, so anywhere from 0 to all clusters become explanations;
* the greedy centrality selectors (``pagerank``, ``eigenvector_centrality``) computed with
  dense vectorised products on the symmetrised affinity (no n²-edge graph objects).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..backend import n_cpu_threads
from ..results.types import Explanation
from . import arrays as A
from .arrays import Array
from .blockwise import in_thread_pool
from .geometry import row_sums_float64
from .graphs import DIRECTION_SIGN
from .spectral import top_eigenvectors

CLUSTERING_METHODS = ("spectral", "pagerank", "eigenvector_centrality")
_GATHER_BYTES = 64 * 2**20


def rows_per_chunk(n_cols: int) -> int:
    """Rows of an n_cols-wide float32 block that fit the gather budget (bounds temporaries)."""
    return max(1, _GATHER_BYTES // (4 * max(n_cols, 1)))


def affinity_block(diff: Array, rows: np.ndarray, cols: np.ndarray, beta: float,
                   direction: str) -> Array:
    """``A[rows][:, cols]`` of a direction's (unsymmetrised) affinity, from ``diff``."""
    block = A.take(A.take(diff, rows, 0), cols, 1)
    block *= DIRECTION_SIGN[direction] * beta
    return A.exp_(block)


def block_sums(S: Array, labels: np.ndarray, n_labels: int) -> np.ndarray:
    """``B[c, c'] = Σ_{i∈c, j∈c'} S[i, j]`` for all label pairs, by ``Yᵀ S Y`` with the
    one-hot n×K label matrix ``Y``.

    With ``S = (A + Aᵀ)/2``, ``B[c, c] = Σ_{i,j∈c} A[i, j]``, so the mean within-cluster
    affinity of the (unsymmetrised) ``A`` is ``B[c, c] / |c|²`` — and the mean over any union
    ``U`` of clusters is ``Σ_{c,c'∈U} B[c, c'] / |U|²``. Summed in float64, a row block of
    ``S`` at a time (bounded temporaries), so the means do not depend on how a float32 BLAS
    orders its sums.
    """
    n = S.shape[0]
    Y = A.zeros((n, n_labels), S, "float64")
    Y[A.like(np.arange(n), S), A.like(np.asarray(labels), S)] = 1.0
    out = A.zeros((n_labels, n_labels), S, "float64")
    step = max(1, rows_per_chunk(n) // 2)   # float64 rows: half the float32 budget
    # numpy: every block is cast into one buffer (a fresh 64 MiB copy per block made the
    # kernel map and zero it again each time); the products are the same to the last bit
    buf = None if A.is_tensor(S) else np.empty((min(step, n), n), dtype=np.float64)
    for s in range(0, n, step):
        if buf is None:
            rows = A.astype(S[s:s + step], "float64")
        else:
            rows = buf[:min(step, n - s)]
            _cast_rows(rows, S[s:s + step])
        out += Y[s:s + step].T @ (rows @ Y)
    return A.host(out)


def _cast_rows(out: np.ndarray, M: np.ndarray) -> None:
    """``out[:] = M`` (with a cast), in row chunks in the thread pool: a cast is one thread's
    loop in numpy, and element-wise, so the chunks may run in any order."""
    chunk = max(1, -(-len(M) // max(1, 4 * n_cpu_threads())))
    in_thread_pool(lambda s: np.copyto(out[s:s + chunk], M[s:s + chunk]),
                   range(0, len(M), chunk))


def union_mean(sums: np.ndarray, sizes: np.ndarray, labels: np.ndarray | list[int]) -> float:
    """Mean affinity over the union of the given clusters (see :func:`block_sums`)."""
    idx = np.asarray(labels, dtype=np.int64)
    total = float(sizes[idx].sum())
    return float(sums[np.ix_(idx, idx)].sum() / total**2) if total else float("nan")


def cluster_rank_labels(means: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """Label of each cluster from its mean affinity (ties by cluster index).

    Without a threshold (the paper): the 0-based rank by ascending mean, so the weakest
    cluster is label 0, the no-change group. With ``threshold`` τ (RDX v2): 0 for every
    cluster with mean < τ, ``rank + 1`` for the others, where ``rank`` is the 0-based position
    among *all* clusters — surviving labels lie in 1..K and have gaps where clusters were
    filtered (the original v2 code's labels; the estimator renumbers the survivors 1, 2, ...).

    Means [0.8, 1.05, 1.3, 2.7, 4.0] give [0, 1, 2, 3, 4] and, with τ = 1.1, [0, 0, 3, 4, 5].
    """
    means = np.asarray(means, dtype=np.float64)
    order = np.lexsort((np.arange(len(means)), means))
    rank = np.empty(len(means), dtype=np.int64)
    rank[order] = np.arange(len(means))
    if threshold is None:
        return rank
    return np.where(means < float(threshold), 0, rank + 1)


def pagerank(W: Array, *, alpha: float = 0.85, tol: float = 1e-6,
             max_iter: int = 100) -> np.ndarray:
    """PageRank of the undirected weighted graph with dense symmetric weights ``W``.

    Same iteration and stopping rule as ``networkx.pagerank`` (uniform start and
    teleport, stop when the L1 change is below ``n·tol``); self-loops count once.
    """
    n = W.shape[0]
    deg = row_sums_float64(W)
    x = A.like(np.full(n, 1.0 / n), W, "float64")
    for _ in range(max_iter):
        x_last = x
        x = alpha * A.astype(W @ A.astype(x / deg, "float32"), "float64") + (1.0 - alpha) / n
        if float(abs(x - x_last).sum()) < n * tol:
            break
    return A.host(x)


def eigenvector_centrality(W: Array, *, random_state: int = 0) -> np.ndarray:
    """Leading eigenvector of ``W`` (positive sum, unit L2 norm), as networkx's
    ``eigenvector_centrality_numpy`` returns it for an undirected weighted graph."""
    v0 = np.random.RandomState(random_state).uniform(-1, 1, W.shape[0])
    v = top_eigenvectors(W, 1, "arpack", v0)[:, 0]
    return v / (np.sign(v.sum()) * np.linalg.norm(v))


def greedy_centrality_clusters(W: Array, diff: Array, *, centrality: np.ndarray,
                               n_clusters: int, cluster_size: int, beta: float,
                               direction: str) -> np.ndarray:
    """Greedy selection: labels 1..n_clusters in selection order, 0 = rest.

    Repeatedly take the unassigned image with the highest centrality; its cluster is itself
    plus the ``cluster_size − 1`` unassigned images with the largest affinity in its row of
    the (unsymmetrised) affinity matrix. (The anchor is excluded from its own candidates;
    the original could pick it twice.)
    """
    n = diff.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    used = np.zeros(n, dtype=bool)
    cent = np.asarray(centrality, dtype=np.float64).copy()
    all_idx = np.arange(n)
    for label in range(1, n_clusters + 1):
        if used.all():
            break
        cent[used] = -np.inf
        anchor = int(np.argmax(cent))
        used[anchor] = True
        free = all_idx[~used]
        take = min(cluster_size - 1, len(free))
        row = A.host(affinity_block(diff, np.array([anchor]), free, beta, direction)[0]
                     ).astype(np.float64)
        # largest affinity first; ties by index (lexsort is stable on the secondary key)
        chosen = free[np.lexsort((free, -row))[:take]]
        members = np.concatenate([[anchor], chosen])
        labels[members] = label
        used[members] = True
    return labels


def explanations_of(raw: np.ndarray, kept: list, means: np.ndarray, low: np.ndarray,
                    grid_of: Callable[[np.ndarray], Sequence[int]], *,
                    extra_of: Callable[[int], dict] | None = None
                    ) -> tuple[np.ndarray, list[Explanation]]:
    """Relabel a clustering and make its explanations.

    ``kept`` clusters (in order) become labels 1, 2, ... and every other cluster label 0
    (the no-change group); each kept cluster becomes an :class:`Explanation` with its
    members, mean affinity, low-affinity flag and the grid ``grid_of(members)`` chooses
    (called in order, so a grid strategy's random generator is drawn in the same sequence
    by the dense and the sparse fits).
    """
    new_label = np.zeros(len(means), dtype=np.int64)
    new_label[list(kept)] = np.arange(1, len(kept) + 1)
    labels = new_label[raw]
    explanations = []
    for j, c in enumerate(kept, start=1):
        members = np.flatnonzero(labels == j)
        grid = grid_of(members)
        explanations.append(Explanation(images=[int(i) for i in grid], members=members.tolist(),
                                        mean_affinity=float(means[c]),
                                        low_affinity=bool(low[c]),
                                        extra=extra_of(c) if extra_of is not None else {}))
    return labels, explanations
