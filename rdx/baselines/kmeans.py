"""K-means baseline: each cluster of one model's representation is a concept.

The paper fits scikit-learn ``KMeans(n_clusters=k, random_state=seed)`` on each
representation separately and shows, for every cluster, the ``grid_size`` (9) images —
among **all** n images, not only the cluster's members — nearest (Euclidean) to the
cluster mean. ``n_init`` is pinned explicitly here because scikit-learn changed its default
(10 before 1.4, ``'auto'`` = 1 with k-means++ after), which silently changes results.

scikit-learn's k-means is run on one OpenMP thread (:func:`seeded_kmeans`): its parallel
passes add the threads' partial sums (the inertia, the new centres) in the order the threads
finish. With three or more threads that order changes from run to run, so on a many-core
machine two fits with the same seed could differ in the last bits, and the best of the
``n_init`` restarts — chosen by inertia — could be another one, with the clusters numbered
differently. One thread gives the same result on every machine.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from .. import validation as V
from ..errors import RDXInputError
from .base import ConceptExtractor, check_n_concepts

GRID_STRATEGIES = ("centroid", "random")


def n_distinct_rows(X: np.ndarray) -> int:
    """Number of distinct images (rows); k-means cannot make more non-empty clusters."""
    return int(np.unique(X, axis=0).shape[0])


def seeded_kmeans(X: np.ndarray, k: int, n_init: int, random_state: int) -> KMeans:
    """scikit-learn ``KMeans(n_clusters=k, n_init=n_init, random_state=random_state)`` fitted
    to ``X`` on one OpenMP thread, so that the same seed gives the same fit to the last bit
    whatever the machine's core count and load (see the module's docstring).

    The limit is set in the calling thread, where scikit-learn reads the OpenMP thread
    count (each thread has its own), and restored on return.
    """
    with threadpool_limits(limits=1, user_api="openmp"):
        return KMeans(n_clusters=k, n_init=int(n_init), random_state=int(random_state)).fit(X)


def check_k_for_clustering(k: Any, X: np.ndarray, method: str) -> int:
    """``k`` clusters need at least ``k`` distinct images (duplicates share a cluster)."""
    n = X.shape[0]
    k = check_n_concepts(k, n)
    distinct = n_distinct_rows(X)
    if k > distinct:
        raise RDXInputError(
            f"n_explanations={k} is too large for {method}: X has only {distinct} distinct "
            f"images (of {n}), so at most {distinct} non-empty clusters exist. Use "
            f"n_explanations <= {distinct} or remove duplicate images.")
    return k


class KMeansConcepts(ConceptExtractor):
    """K-means clusters of one representation as concepts.

    Parameters
    ----------
    n_explanations : int, default 3
        Number of clusters ``k``; every cluster is shown.
    n_init : int, default 10
        K-means restarts (best inertia kept). Pinned so that results do not depend on the
        scikit-learn version (10 was the default when the paper was written).
    grid_strategy : {"centroid", "random"}, default "centroid"
        ``"centroid"``: the grid of cluster ``c`` is the ``grid_size`` images (among all n)
        nearest to the mean of cluster ``c`` — the paper's default. ``"random"``:
        ``grid_size`` members of cluster ``c`` drawn at random (seeded), fewer if the
        cluster is smaller.
    grid_size : int, default 9
        Images per explanation grid.
    random_state : int, default 42
        Seed of the k-means initialisation and of the random grids.

    Attributes
    ----------
    codes_ : ndarray (n, k) float32
        Negative Euclidean distance of every image to every cluster mean, so that the
        largest activations of column ``c`` are the images nearest to centroid ``c``.
    labels_ : ndarray (n,) int
        Cluster id of every image (same ids as ``concepts_``).
    concepts_ : list[int]
        ``[0, ..., k-1]``.
    dictionary_ : ndarray (k, d) float32
        Cluster means (equal to scikit-learn's ``cluster_centers_`` up to its tolerance).
    grids_ : list[list[int]]
        Grid image ids per concept.
    info_ : dict
        ``inertia``, ``cluster_sizes``, ``n_iter``, ``n_init``, ``grid_strategy``.
    """

    def __init__(self, n_explanations: int = 3, *, n_init: int = 10,
                 grid_strategy: str = "centroid", grid_size: int = 9,
                 random_state: int = 42) -> None:
        self.n_explanations = n_explanations
        self.n_init = n_init
        self.grid_strategy = grid_strategy
        self.grid_size = grid_size
        self.random_state = random_state

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        V.check_int(self.n_init, "n_init", minimum=1)
        V.check_choice(self.grid_strategy, "grid_strategy", GRID_STRATEGIES)

    def _fit(self, X: np.ndarray) -> None:
        k = check_k_for_clustering(self.n_explanations, X, "KMeans")
        km = seeded_kmeans(X, k, self.n_init, self.random_state)
        labels = km.labels_.astype(np.int64)
        sizes = np.bincount(labels, minlength=k)
        # The grid is defined from the *mean of the cluster's members*; scikit-learn's
        # centres are that mean only up to its stopping tolerance, so recompute it (float64
        # sums: float32 accumulation over thousands of images loses digits).
        means = km.cluster_centers_.astype(np.float64)
        X64 = X.astype(np.float64)
        for c in np.flatnonzero(sizes):
            means[c] = X64[labels == c].mean(axis=0)
        # Distances one cluster at a time (n×d temporary) rather than the expanded
        # |x|² − 2x·μ + |μ|² formula, which cancels badly for images close to a centroid —
        # exactly the ones the grid is made of.
        dist = np.empty((X.shape[0], k), dtype=np.float64)
        for c in range(k):
            dist[:, c] = np.linalg.norm(X64 - means[c], axis=1)
        self.codes_ = (-dist).astype(np.float32)
        self.labels_ = labels
        self.concepts_ = list(range(k))
        self.dictionary_ = means.astype(np.float32)
        if self.grid_strategy == "random":
            rng = np.random.default_rng(int(self.random_state))
            g = int(self.grid_size)
            self.grids_ = [rng.permutation(np.flatnonzero(labels == c))[:g].tolist()
                           for c in range(k)]
        self.info_ = {
            "inertia": float(km.inertia_),
            "cluster_sizes": sizes.tolist(),
            "n_iter": int(km.n_iter_),
            "n_init": int(self.n_init),
            "grid_strategy": self.grid_strategy,
        }
