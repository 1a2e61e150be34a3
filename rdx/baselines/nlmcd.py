"""NLMCD: non-linear manifold concept discovery, compared across two models.

Vielhaben, Bareeva, Berend, Samek & Strodthoff ("Beyond Scalars", NeurIPS 2025), as
configured in the RDX paper. Per representation: UMAP (50-D, 30 neighbours, min_dist 0.01)
→ HDBSCAN (min cluster size 50, min samples 20, leaf selection) → soft concept memberships
(each image's probability of belonging to each cluster) and hard labels. The number of
concepts per model is whatever HDBSCAN finds.

Concepts of the two models are compared on a subsample of the images (every 5th by
default) with the pairwise *concept discrepancy* (:func:`concept_discrepancy`)

    Δ[a, b] = 2/(n'(n'−1)) · Σ_{i<j} | |A_ia − A_ja| − |B_ib − B_jb| | / 2,

which is 0 when the two membership vectors induce the same pairwise differences (the same
concept) and grows as they disagree. A concept's score is its distance to the *closest*
concept of the other model (``min`` over that model's concepts), and each model shows the
k concepts with the **largest** score (:func:`select_discrepant_concepts`) — the most
model-specific concepts, as the method's authors and the RDX paper describe it.

Soft memberships are ``hdbscan.prediction.all_points_membership_vectors`` (the bulk
routine for the points HDBSCAN was fit on; the original called ``membership_vector`` on
the same points) and hard labels are the fitted ``labels_`` (the original re-predicted them
with ``approximate_predict``); −1 = noise. All concepts keep their labels (the original
reset the labels of non-shown concepts to −1).

Fixes of the original code: concepts were sorted by *ascending*
discrepancy (it showed the best-matched concepts); grids were random cluster members; UMAP
was unseeded; the alignment loop was O(concepts × samples) Python. Here the discrepancy is
vectorised in chunks of bounded memory, grids are deterministic (below) and UMAP is seeded.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch

from .. import validation as V
from ..errors import RDXInputError
from .base import PairExplainer

#: elements of the largest temporary tensor in :func:`concept_discrepancy` (float64: 128 MiB)
_DISCREPANCY_BUDGET = 2**24


def concept_discrepancy(Ma: Any, Mb: Any, *, budget: int = _DISCREPANCY_BUDGET) -> np.ndarray:
    """Discrepancy ``Δ[a, b]`` between every concept ``a`` of one model and ``b`` of another.

    Parameters
    ----------
    Ma, Mb
        ``n × k_a`` and ``n × k_b`` soft memberships of the same ``n ≥ 2`` images.
    budget
        Most elements of a temporary tensor; rows and concepts are processed in chunks so
        that memory stays bounded for any n (the cost is O(n² k_a k_b) regardless).

    Returns
    -------
    ``k_a × k_b`` float64 array, ``Δ[a,b] = 1/(n(n−1)) Σ_{i<j} | |Ma_ia − Ma_ja| −
    |Mb_ib − Mb_jb| |`` (equivalently ``2/(n(n−1)) Σ_{i<j} |…| / 2``).
    """
    X = torch.as_tensor(np.asarray(Ma, dtype=np.float64))
    Y = torch.as_tensor(np.asarray(Mb, dtype=np.float64))
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0]:
        raise RDXInputError(f"memberships must be n×k_a and n×k_b with the same n; got "
                            f"{tuple(X.shape)} and {tuple(Y.shape)}.")
    n, ka = X.shape
    kb = Y.shape[1]
    if n < 2:
        raise RDXInputError(f"the concept discrepancy needs at least 2 images, got {n}.")
    # Σ_{i<j} = ½ Σ_{i≠j}, and the i=j terms are 0: sum over all ordered pairs instead of
    # masking a triangle, in blocks of rows i (all j) × blocks of concepts a (all b).
    per_a = n * kb
    a_blk = max(1, min(ka, budget // per_a))
    r_blk = max(1, budget // (per_a * a_blk))
    total = torch.zeros(ka, kb, dtype=torch.float64)
    for s in range(0, n, r_blk):
        Dx = (X[s:s + r_blk, None, :] - X[None, :, :]).abs_()  # r × n × ka
        Dy = (Y[s:s + r_blk, None, :] - Y[None, :, :]).abs_()  # r × n × kb
        for a0 in range(0, ka, a_blk):
            diff = Dx[:, :, a0:a0 + a_blk, None] - Dy[:, :, None, :]
            total[a0:a0 + a_blk] += diff.abs_().sum(dim=(0, 1))
    return (total / (2.0 * n * (n - 1))).numpy()


def select_discrepant_concepts(delta: Any, k: int) -> dict[str, np.ndarray]:
    """The ``k`` most model-specific concepts of each model, from a discrepancy matrix.

    A concept of model A (row ``a``) scores ``min_b Δ[a, b]`` — how far it is from its best
    match in model B — and symmetrically ``min_a Δ[a, b]`` for model B's concepts (columns).
    Each model's ``k`` concepts with the **largest** score are returned, highest first (ties:
    the lower concept id first).

    Returns
    -------
    dict with ``a``, ``b`` (chosen concept ids) and ``score_a`` (k_a), ``score_b`` (k_b).
    """
    delta = np.asarray(delta, dtype=np.float64)
    ka, kb = delta.shape
    if k > min(ka, kb):
        raise RDXInputError(f"cannot choose {k} concepts per model from {ka} concepts of "
                            f"model A and {kb} of model B.")
    score_a, score_b = delta.min(axis=1), delta.min(axis=0)
    return {"a": np.argsort(-score_a, kind="stable")[:k],
            "b": np.argsort(-score_b, kind="stable")[:k],
            "score_a": score_a, "score_b": score_b}


def subsample_indices(n: int, ratio: float) -> np.ndarray:
    """``ceil(n·ratio)`` evenly spaced image indices starting at 0 (ratio 0.2: every 5th)."""
    m = max(2, min(n, math.ceil(n * ratio - 1e-9)))
    return np.unique(np.floor(np.arange(m) * (n / m)).astype(np.int64))


def membership_grid(memberships: np.ndarray, labels: np.ndarray, concept: int,
                    grid_size: int) -> list[int]:
    """Grid of a concept: its hard members ranked by soft membership (highest first).

    If the cluster has fewer than ``grid_size`` members (only possible with a small
    ``min_cluster_size``), the non-members with the highest membership fill the grid. Ties
    go to the lower image index. (The original drew random members.)
    """
    m = memberships[:, concept]
    order = np.lexsort((np.arange(len(m)), -m, labels != concept))
    return order[:grid_size].tolist()


class NLMCD(PairExplainer):
    """UMAP → HDBSCAN concepts per model; show each model's most model-specific concepts.

    Parameters
    ----------
    n_explanations
        Concepts shown per model (k); HDBSCAN must find at least k in each model.
    n_components
        UMAP output dimension (paper 50), clipped to the feature dimension and to ``n − 3``
        (UMAP's spectral initialisation needs fewer components than images).
    n_neighbors
        UMAP neighbours (paper 30), clipped to ``n − 1``.
    min_dist
        UMAP minimum distance (paper 0.01).
    min_cluster_size, min_samples
        HDBSCAN parameters (paper 50 and 20); ``min_samples`` is clipped to ``n − 1``.
    cluster_selection_method
        HDBSCAN cluster selection, ``"leaf"`` (paper) or ``"eom"``.
    subsample_ratio
        Fraction of the images (evenly spaced) on which the concept discrepancy is computed
        (paper 0.2: every 5th image); its cost is quadratic in this subsample.
    grid_size
        Images per grid: the hard members with the highest soft membership.
    random_state
        Seed of UMAP (with a seed UMAP runs single-threaded, which makes it reproducible).

    Attributes
    ----------
    directions_ : dict
        ``a_over_b`` = model A's k most discrepant concepts (highest score first), with
        ``members`` = the cluster's hard members; ``b_over_a`` likewise for model B.
    codes_ : dict
        ``{"a": n×m_a, "b": n×m_b}`` soft memberships of every HDBSCAN concept (float32).
    labels_ : dict
        ``{"a": n, "b": n}`` HDBSCAN hard labels (−1 = noise), all concepts kept.
    concepts_ : dict
        ``{"a": [...], "b": [...]}`` the shown concept ids.
    discrepancy_ : ndarray
        ``m_a × m_b`` concept discrepancy on the subsample.
    info_ : dict
        Concepts found, noise fraction, UMAP dimension, scores of the shown concepts, ...
    arrays_ : dict
        ``a_codes``/``b_codes`` (n×k memberships of the shown concepts), ``a_concepts``,
        ``b_concepts``, ``a_labels``, ``b_labels``, ``discrepancy``.
    """

    def __init__(self, n_explanations: int = 3, *, n_components: int = 50,
                 n_neighbors: int = 30, min_dist: float = 0.01, min_cluster_size: int = 50,
                 min_samples: int = 20, cluster_selection_method: str = "leaf",
                 subsample_ratio: float = 0.2, grid_size: int = 9,
                 random_state: int = 42) -> None:
        self.n_explanations = n_explanations
        self.n_components = n_components
        self.n_neighbors = n_neighbors
        self.min_dist = min_dist
        self.min_cluster_size = min_cluster_size
        self.min_samples = min_samples
        self.cluster_selection_method = cluster_selection_method
        self.subsample_ratio = subsample_ratio
        self.grid_size = grid_size
        self.random_state = random_state

    def _check_params(self, n: int | None) -> None:
        super()._check_params(n)
        V.check_int(self.n_components, "n_components", minimum=1)
        V.check_int(self.n_neighbors, "n_neighbors", minimum=2)
        md = V.check_number(self.min_dist, "min_dist", what="a number >= 0")
        if md < 0:
            raise RDXInputError(f"min_dist must be >= 0, got {self.min_dist!r}.")
        mcs = V.check_int(self.min_cluster_size, "min_cluster_size", minimum=2)
        V.check_int(self.min_samples, "min_samples", minimum=1)
        V.check_choice(self.cluster_selection_method, "cluster_selection_method",
                       ("leaf", "eom"))
        r = V.check_number(self.subsample_ratio, "subsample_ratio", what="a number in (0, 1]")
        if not 0 < r <= 1:
            raise RDXInputError(f"subsample_ratio must be in (0, 1], got {self.subsample_ratio!r}.")
        if n is not None:
            k = int(self.n_explanations)
            if n < k * mcs:
                raise RDXInputError(
                    f"NLMCD needs at least n_explanations × min_cluster_size = {k} × {mcs} = "
                    f"{k * mcs} images (every HDBSCAN concept has at least min_cluster_size "
                    f"members), but there are only {n}. Lower min_cluster_size (and "
                    "min_samples) or n_explanations, or use more images.")
            if n <= 4:
                raise RDXInputError(f"NLMCD needs more than 4 images for UMAP, got {n}.")

    # ------------------------------------------------------------------ per model
    def _concepts(self, X: np.ndarray, name: str) -> dict[str, Any]:
        """UMAP → HDBSCAN on one representation: memberships, labels, diagnostics."""
        # imported here: umap/numba/hdbscan take seconds to import
        import hdbscan
        import umap

        n, d = X.shape
        n_comp = max(1, min(int(self.n_components), d, n - 3))
        n_nb = min(int(self.n_neighbors), n - 1)
        with warnings.catch_warnings():
            # "n_jobs overridden by setting random_state" and spectral-init fallbacks on
            # disconnected graphs are expected and harmless here
            warnings.simplefilter("ignore")
            emb = umap.UMAP(n_components=n_comp, n_neighbors=n_nb, min_dist=float(self.min_dist),
                            metric="euclidean", random_state=int(self.random_state)
                            ).fit_transform(X)
        emb = np.asarray(emb, dtype=np.float64)
        clusterer = hdbscan.HDBSCAN(
            min_cluster_size=int(self.min_cluster_size),
            min_samples=min(int(self.min_samples), n - 1), metric="euclidean",
            cluster_selection_method=self.cluster_selection_method,
            prediction_data=True).fit(emb)
        labels = np.asarray(clusterer.labels_, dtype=np.int64)
        m = int(labels.max()) + 1
        k = int(self.n_explanations)
        if m < k:
            raise RDXInputError(
                f"HDBSCAN found {m} concept{'s' if m != 1 else ''} in model {name}, fewer than "
                f"n_explanations={k}. Lower min_cluster_size (now {self.min_cluster_size}) "
                f"and/or min_samples (now {self.min_samples}), or ask for fewer explanations."
                + (" (HDBSCAN never reports one cluster covering all images, so a model "
                   "whose images form a single dense group yields no concept.)" if m == 0
                   else ""))
        from hdbscan.prediction import all_points_membership_vectors

        M = np.asarray(all_points_membership_vectors(clusterer), dtype=np.float64)
        M = M.reshape(n, m)  # a single cluster comes back as a 1-D vector
        return {"memberships": M, "labels": labels, "n_components": n_comp,
                "n_neighbors": n_nb, "n_concepts": m,
                "noise_fraction": float((labels < 0).mean())}

    # ------------------------------------------------------------------ fit
    def _fit(self, A: np.ndarray, B: np.ndarray) -> None:
        k = int(self.n_explanations)
        g = int(self.grid_size)
        ca, cb = self._concepts(A, "A"), self._concepts(B, "B")
        idx = subsample_indices(A.shape[0], float(self.subsample_ratio))
        delta = concept_discrepancy(ca["memberships"][idx], cb["memberships"][idx])
        sel = select_discrepant_concepts(delta, k)

        self.codes_ = {"a": ca["memberships"].astype(np.float32),
                       "b": cb["memberships"].astype(np.float32)}
        self.labels_ = {"a": ca["labels"], "b": cb["labels"]}
        self.concepts_ = {"a": [int(c) for c in sel["a"]], "b": [int(c) for c in sel["b"]]}
        self.discrepancy_ = delta
        self.directions_: dict[str, list[dict[str, Any]]] = {}
        for direction, side in (("a_over_b", "a"), ("b_over_a", "b")):
            M, lab = self.codes_[side], self.labels_[side]
            exps = []
            for c in self.concepts_[side]:
                e = self._explanation(c, membership_grid(M, lab, c, g), M)
                e["members"] = np.flatnonzero(lab == c).tolist()
                exps.append(e)
            self.directions_[direction] = exps
        self.arrays_ = {
            "a_codes": self.codes_["a"][:, self.concepts_["a"]],
            "b_codes": self.codes_["b"][:, self.concepts_["b"]],
            "a_concepts": np.asarray(self.concepts_["a"], dtype=np.int64),
            "b_concepts": np.asarray(self.concepts_["b"], dtype=np.int64),
            "a_labels": self.labels_["a"], "b_labels": self.labels_["b"],
            "discrepancy": delta.astype(np.float32)}
        self.info_ = {
            "n_concepts": {"a": ca["n_concepts"], "b": cb["n_concepts"]},
            "noise_fraction": {"a": ca["noise_fraction"], "b": cb["noise_fraction"]},
            "umap_n_components": {"a": ca["n_components"], "b": cb["n_components"]},
            "umap_n_neighbors": {"a": ca["n_neighbors"], "b": cb["n_neighbors"]},
            "n_subsample": len(idx),
            "scores": {"a": [float(sel["score_a"][c]) for c in self.concepts_["a"]],
                       "b": [float(sel["score_b"][c]) for c in self.concepts_["b"]]},
            "cluster_sizes": {s: np.bincount(self.labels_[s][self.labels_[s] >= 0]).tolist()
                              for s in ("a", "b")}}
