"""k-means of a spectral embedding: scikit-learn's ``KMeans`` algorithm, written with numpy.

Spectral clustering ends with k-means on the n × K embedding, and the original ran
scikit-learn's ``KMeans(n_init=10)``. Importing scikit-learn costs ~0.6 s (it loads
``scipy.stats`` and pandas) — a third of a whole ``rdx explain`` at the paper's sizes, for
an n × K problem that takes milliseconds. This module follows the same algorithm, step for
step and drawing the same random numbers, so that partitions are scikit-learn's (tested
label for label against ``sklearn.cluster.KMeans``):

* the data are centred (distances do not change; products are more accurate) and the
  tolerance is ``tol`` × the mean per-feature variance;
* greedy k-means++ seeding (Arthur & Vassilvitskii): the first centre uniformly at random,
  each next one the best — lowest total squared distance to the nearest centre — of
  ``2 + ⌊ln k⌋`` candidates drawn with probability ∝ squared distance to the nearest centre;
* Lloyd iterations until no label changes, or until the centres move less than the
  tolerance (then one more assignment); a cluster that empties is moved to the sample
  farthest from its centre;
* of ``n_init`` runs, the lowest inertia (within-cluster sum of squares) wins; a later run
  replaces the best only if its partition differs.
"""
from __future__ import annotations

import numpy as np

#: Lloyd iterations per run at most, and the relative tolerance (scikit-learn's defaults).
MAX_ITER = 300
TOL = 1e-4


def kmeans(X: np.ndarray, n_clusters: int, *, n_init: int = 10,
           random_state: np.random.RandomState, max_iter: int = MAX_ITER,
           tol: float = TOL) -> np.ndarray:
    """Labels (int64, 0..n_clusters−1) of the best of ``n_init`` k-means runs.

    Parameters
    ----------
    X : (n, d) array
        Points (the spectral embedding).
    n_clusters : int
    n_init : int, default=10
        Seedings tried; each draws from ``random_state`` in turn.
    random_state : numpy.random.RandomState
        The generator (spectral clustering shares one with its Lanczos start vector).
    max_iter, tol
        Lloyd iterations per run at most; relative tolerance on the centres' movement.
    """
    X = np.array(X, dtype=np.float64)  # a private copy, centred in place
    tol = float(np.mean(np.var(X, axis=0)) * tol) if tol else 0.0
    X -= X.mean(axis=0)
    sq = np.einsum("ij,ij->i", X, X)
    best_labels, best_inertia = None, None
    for _ in range(int(n_init)):
        centres = _seed_plusplus(X, sq, int(n_clusters), random_state)
        labels, inertia = _lloyd(X, centres, int(max_iter), tol)
        if best_inertia is None or (inertia < best_inertia
                                    and not _same_partition(labels, best_labels)):
            best_labels, best_inertia = labels, inertia
    return best_labels.astype(np.int64)


def _squared_distances(C: np.ndarray, X: np.ndarray, sq: np.ndarray) -> np.ndarray:
    """``|c − x|²`` (rows: centres) as ``|c|² + |x|² − 2c·x``, clamped at 0."""
    d = -2.0 * (C @ X.T)
    d += np.einsum("ij,ij->i", C, C)[:, None]
    d += sq[None, :]
    return np.maximum(d, 0.0, out=d)


def _seed_plusplus(X: np.ndarray, sq: np.ndarray, k: int,
                   rng: np.random.RandomState) -> np.ndarray:
    """Greedy k-means++ centres (see the module docstring)."""
    n = X.shape[0]
    trials = 2 + int(np.log(k))
    weights = np.ones(n)
    centres = np.empty((k, X.shape[1]))
    first = rng.choice(n, p=weights / weights.sum())
    centres[0] = X[first]
    closest = _squared_distances(X[[first]], X, sq)[0]
    potential = closest @ weights
    for c in range(1, k):
        draws = rng.uniform(size=trials) * potential
        candidates = np.searchsorted(np.cumsum(closest), draws)
        np.clip(candidates, None, n - 1, out=candidates)
        dist = _squared_distances(X[candidates], X, sq)
        np.minimum(closest, dist, out=dist)
        potentials = dist @ weights
        best = int(np.argmin(potentials))
        potential, closest = potentials[best], dist[best]
        centres[c] = X[candidates[best]]
    return centres


def _assign(X: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Nearest centre of each point (the first on ties), by ``|c|² − 2x·c``."""
    d = np.einsum("ij,ij->i", centres, centres)[None, :] - 2.0 * (X @ centres.T)
    return np.argmin(d, axis=1)


def _update(X: np.ndarray, labels: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Means of the clusters; an empty cluster takes the point farthest from its centre
    (the farthest first, as many as there are empty clusters)."""
    k = centres.shape[0]
    # per column, bincount adds the points in order, as np.add.at does (the same sums,
    # bit for bit), without ufunc.at's per-element dispatch: 0.2 s per fit at n = 10k
    sums = np.stack([np.bincount(labels, weights=X[:, j], minlength=k)
                     for j in range(X.shape[1])], axis=1) if X.shape[1] else \
        np.zeros_like(centres)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    empty = np.flatnonzero(counts == 0)
    if len(empty):
        dist = ((X - centres[labels]) ** 2).sum(axis=1)
        if dist.max() > 0:
            far = np.argpartition(dist, -len(empty))[:-len(empty) - 1:-1]
            for new, i in zip(empty, far):
                sums[labels[i]] -= X[i]
                counts[labels[i]] -= 1
                sums[new] = X[i]
                counts[new] = 1
    nonzero = counts > 0
    sums[nonzero] /= counts[nonzero][:, None]   # (all points duplicates: an empty stays 0)
    return sums


def _lloyd(X: np.ndarray, centres: np.ndarray, max_iter: int, tol: float
           ) -> tuple[np.ndarray, float]:
    """One k-means run from ``centres``: labels and inertia."""
    old = np.full(X.shape[0], -1)
    converged = False
    for _ in range(max_iter):
        labels = _assign(X, centres)
        new = _update(X, labels, centres)
        shift = float(((new - centres) ** 2).sum())
        centres = new
        if np.array_equal(labels, old):
            converged = True
            break
        if shift <= tol:
            break
        old = labels
    if not converged:
        labels = _assign(X, centres)
    inertia = float(((X - centres[labels]) ** 2).sum())
    return labels, inertia


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labelings are the same partition up to renaming the labels."""
    pairs = np.unique(np.stack([a, b]), axis=1)
    return len(np.unique(pairs[0])) == pairs.shape[1]
