"""Side-by-side 2-D maps of the two representations, aligned so that they can be compared.

``knn_layout`` (the default, ``auto``): a UMAP layout of both representations computed
together in numpy, without umap-learn or numba. Each representation's exact 15-nearest-
neighbour graph is weighted as UMAP weights it (fuzzy memberships: each image's distance to
its nearest neighbour and a bandwidth giving log2(15) total weight, then the fuzzy union of
both directions); both maps start from A's first two principal components and are optimised
for 200 epochs with UMAP's attractive and repulsive forces (min_dist 0.1: umap-learn's a, b
curve; 5 negative samples per edge; learning rate decaying linearly from 1), plus an
alignment pull of each image's two positions towards each other (AlignedUMAP's relation
i → i). Each epoch moves every point at once from the forces of that epoch's sampled edges
(umap-learn moves them one edge after another); both maps draw the same random numbers, so
A == B gives identical maps. On 1797 digits images it preserves as many 15-nearest
neighbours in the map as AlignedUMAP (50 % against 51 %) and the classes as well (10-NN
class agreement 0.96–0.97 for both), in a few seconds instead of a minute: umap-learn's
numba kernels are compiled again in every process (about 20 s before any work).

``aligned_umap``: umap-learn's ``AlignedUMAP`` on [A, B] with the identity relation i → i,
seeded — the authors' viewer's settings (15 neighbours, min_dist 0.1, alignment window 1);
about a minute for 1.5k images. ``pca`` (the fallback for fewer than 20 images, flagged in
the page): each representation's first two principal components, B's map then
rotated/reflected onto A's by orthogonal Procrustes so that the animated transition shows
real movement rather than an arbitrary flip. All maps are scaled to unit RMS radius.

:func:`cached_embed_pair` keeps the maps in ``<folder>/explorer_embedding_<key>.npz``,
keyed by the features' digest, the method, its parameters, the layout's version and the
umap-learn version, so that re-running a finished experiment (or the explorer alone) does
not compute the same maps again.
"""
from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RDXInputError

EMBEDDINGS = ("auto", "knn_layout", "aligned_umap", "pca")
#: what ``auto`` means
DEFAULT_EMBEDDING = "knn_layout"
#: bump when knn_layout computes different maps for the same inputs (keys the cache)
KNN_LAYOUT_VERSION = 1
#: fewer images than this: UMAP's neighbour graph is meaningless, PCA is used
MIN_UMAP_IMAGES = 20


@dataclass
class Embedding:
    a: np.ndarray                   #: n×2
    b: np.ndarray                   #: n×2
    method: str                     #: "knn_layout", "aligned_umap" or "pca"
    params: dict[str, Any] = field(default_factory=dict)
    note: str | None = None         #: why a fallback was used (shown in the page)
    label: str = ""                 #: what the layout is, in words (shown in the page)


def _unit(Y: np.ndarray, center: np.ndarray, scale: float) -> np.ndarray:
    return ((Y - center) / scale).astype(np.float32)


def _normalise(Ya: np.ndarray, Yb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One shift and scale for both maps (keeps their relative placement)."""
    both = np.concatenate([Ya, Yb])
    c = both.mean(axis=0)
    r = float(np.sqrt(((both - c) ** 2).sum(axis=1).mean())) or 1.0
    return _unit(Ya, c, r), _unit(Yb, c, r)


def pca_pair(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First two principal components of each, B's rotated onto A's (Procrustes)."""
    from scipy.linalg import orthogonal_procrustes

    def pcs(X: np.ndarray) -> np.ndarray:
        Xc = np.asarray(X, dtype=np.float64)
        Xc = Xc - Xc.mean(axis=0)
        U, S, _ = np.linalg.svd(Xc, full_matrices=False)
        Y = U[:, :2] * S[:2]
        if Y.shape[1] < 2:
            Y = np.pad(Y, ((0, 0), (0, 2 - Y.shape[1])))
        return Y

    Ya, Yb = pcs(A), pcs(B)
    Rot, _ = orthogonal_procrustes(Yb, Ya)
    return Ya, Yb @ Rot



# ------------------------------------------------------------------------- knn_layout

def exact_knn(X: np.ndarray, k: int, *, block: int | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` nearest rows by Euclidean distance, itself first (n×k indices and
    distances, ascending; ties by index). Exact, in row blocks of ``block`` × n distances
    (default: at most 2048 rows and about 256 MB of float64 per block)."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    if block is None:
        block = max(64, min(2048, (1 << 25) // max(n, 1)))
    sq = (X * X).sum(axis=1)
    idx = np.empty((n, k), np.int64)
    dist = np.empty((n, k))
    for s in range(0, n, block):
        rows = np.arange(s, min(n, s + block))
        D = sq[rows, None] - 2.0 * (X[rows] @ X.T) + sq[None, :]
        np.maximum(D, 0.0, out=D)
        D[np.arange(len(rows)), rows] = -1.0        # itself first, even beside a duplicate
        part = np.argpartition(D, k - 1, axis=1)[:, :k]
        d = np.take_along_axis(D, part, axis=1)
        order = np.lexsort((part, d), axis=1)
        idx[rows] = np.take_along_axis(part, order, axis=1)
        dist[rows] = np.sqrt(np.maximum(np.take_along_axis(d, order, axis=1), 0.0))
    return idx, dist


def fuzzy_graph(idx: np.ndarray, dist: np.ndarray, *, n_iter: int = 64) -> Any:
    """UMAP's fuzzy neighbour graph (``scipy.sparse`` COO, symmetric, weights in (0, 1]).

    Row i's weights are exp(−max(d − ρᵢ, 0)/σᵢ) over its neighbours (itself left out): ρᵢ
    its distance to the nearest neighbour at a positive distance, σᵢ found by bisection so
    that the weights add up to log2(k) (at least 1e-3 of its mean distance, as umap-learn);
    the graph is their fuzzy union W + Wᵀ − W∘Wᵀ."""
    from scipy import sparse

    n, k = idx.shape
    d = dist[:, 1:]
    rho = np.where(d > 0, d, np.inf).min(axis=1)
    rho[~np.isfinite(rho)] = 0.0                    # all neighbours duplicates of it
    dd = np.maximum(d - rho[:, None], 0.0)
    target = np.log2(k)
    lo, hi, sigma = np.zeros(n), np.full(n, np.inf), np.ones(n)
    for _ in range(n_iter):                          # all rows' bisections at once
        big = np.exp(-dd / sigma[:, None]).sum(axis=1) > target
        hi = np.where(big, sigma, hi)
        lo = np.where(big, lo, sigma)
        sigma = np.where(np.isinf(hi), sigma * 2.0, (lo + hi) / 2.0)
    floor = 1e-3 * np.where(rho > 0, d.mean(axis=1), d.mean())
    sigma = np.maximum(sigma, np.maximum(floor, 1e-12))
    W = sparse.csr_matrix((np.exp(-dd / sigma[:, None]).ravel(),
                           (np.repeat(np.arange(n), k - 1), idx[:, 1:].ravel())),
                          shape=(n, n))
    return (W + W.T - W.multiply(W.T)).tocoo()


def umap_ab(min_dist: float, spread: float = 1.0) -> tuple[float, float]:
    """umap-learn's a, b of the low-dimensional similarity 1/(1 + a d^2b) for ``min_dist``
    (the same least-squares fit, so the clusters are as tight as umap-learn's)."""
    from scipy.optimize import curve_fit

    x = np.linspace(0, spread * 3, 300)
    y = np.where(x < min_dist, 1.0, np.exp(-(x - min_dist) / spread))
    (a, b), _ = curve_fit(lambda x, a, b: 1.0 / (1.0 + a * x ** (2 * b)), x, y)
    return float(a), float(b)


def knn_layout(Xs: list[np.ndarray], *, n_neighbors: int = 15, min_dist: float = 0.1,
               n_epochs: int = 200, seed: int = 42, alignment: float = 0.1,
               negative_samples: int = 5, on_epoch: Callable[[int], None] | None = None
               ) -> list[np.ndarray]:
    """Aligned UMAP layouts of the representations ``Xs`` (same images, same order); see
    the module docstring. ``on_epoch(e)`` is called after each epoch (a progress bar)."""
    a, b = umap_ab(min_dist)
    n = len(Xs[0])
    edges = []
    for X in Xs:
        P = fuzzy_graph(*exact_knn(X, n_neighbors))
        # umap-learn's rule: an edge sampled less than once in n_epochs is dropped
        keep = P.data >= P.data.max() / n_epochs
        edges.append((P.row[keep], P.col[keep], P.data[keep] / P.data.max()))
    Xc = np.asarray(Xs[0], np.float64) - np.asarray(Xs[0], np.float64).mean(axis=0)
    U, S, _ = np.linalg.svd(Xc, full_matrices=False)
    Y0 = np.pad(U[:, :2] * S[:2], ((0, 0), (0, max(0, 2 - U.shape[1]))))
    span = np.ptp(Y0, axis=0)
    Y0 = 10.0 * (Y0 - Y0.min(axis=0)) / np.where(span > 0, span, 1.0)   # umap's [0, 10]
    Ys = [Y0.copy() for _ in Xs]
    # one stream per map from the same seed: equal graphs get equal draws (A == B: one map)
    rngs = [np.random.default_rng(seed) for _ in Xs]
    for epoch in range(n_epochs):
        rate = 1.0 - epoch / n_epochs
        steps = []
        for Y, (head, tail, w), rng in zip(Ys, edges, rngs):
            on = rng.random(len(w)) < w              # each edge as often as its weight
            h, t = head[on], tail[on]
            diff = Y[h] - Y[t]
            d2 = np.einsum("ij,ij->i", diff, diff)
            p = d2 ** b
            with np.errstate(divide="ignore", invalid="ignore"):
                c = np.where(d2 > 0, -2.0 * a * b * (p / d2) / (a * p + 1.0), 0.0)
            g = np.clip(c[:, None] * diff, -4.0, 4.0)
            G = np.empty_like(Y)
            for j in range(2):                       # both ends move (umap's move_other)
                G[:, j] = np.bincount(h, g[:, j], n) - np.bincount(t, g[:, j], n)
            hn = np.repeat(h, negative_samples)
            kn = rng.integers(0, n, len(hn))
            diff = Y[hn] - Y[kn]
            d2 = np.einsum("ij,ij->i", diff, diff)
            c = 2.0 * b / ((0.001 + d2) * (a * d2 ** b + 1.0))
            g = np.where(d2[:, None] > 0, np.clip(c[:, None] * diff, -4.0, 4.0), 4.0)
            g[hn == kn] = 0.0
            for j in range(2):
                G[:, j] += np.bincount(hn, g[:, j], n)
            steps.append(G)
        if len(Ys) == 2 and alignment:
            gap = Ys[0] - Ys[1]
            steps[0] -= alignment * gap
            steps[1] += alignment * gap
        Ys = [Y + rate * G for Y, G in zip(Ys, steps)]
        if on_epoch is not None:
            on_epoch(epoch)
    return Ys


KNN_LAYOUT_PARAMS = {"n_epochs": 200, "alignment": 0.1, "negative_samples": 5,
                     "init": "pca_of_a", "knn": "exact_euclidean"}


def _knn_layout_pair(A: np.ndarray, B: np.ndarray, *, seed: int, n_neighbors: int,
                     min_dist: float, progress: bool) -> Embedding:
    from tqdm.auto import tqdm

    params = {"n_components": 2, "n_neighbors": int(min(n_neighbors, len(A) - 1)),
              "min_dist": float(min_dist), "random_state": int(seed), **KNN_LAYOUT_PARAMS,
              "version": KNN_LAYOUT_VERSION}
    with tqdm(total=params["n_epochs"], desc="explorer: layout (epochs)",
              disable=not progress, leave=False) as bar:
        Ya, Yb = knn_layout([A, B], n_neighbors=params["n_neighbors"], min_dist=min_dist,
                            n_epochs=params["n_epochs"], seed=seed,
                            alignment=params["alignment"],
                            negative_samples=params["negative_samples"],
                            on_epoch=lambda e: bar.update(1))
    return Embedding(*_normalise(Ya, Yb), "knn_layout", params, None, LABELS["knn_layout"])


#: each layout in words, for the page
LABELS = {
    "knn_layout": ("aligned UMAP-style layout computed by rdx (each model's exact "
                   "15-nearest-neighbour fuzzy graph, both maps started from A's PCA, 200 "
                   "epochs, each image pulled towards its place in the other map; "
                   "rdx explore --embedding aligned_umap gives umap-learn's AlignedUMAP)"),
    "aligned_umap": ("umap-learn's AlignedUMAP (15 neighbours, min_dist 0.1, alignment "
                     "window 1: the authors' viewer's settings)"),
    "pca": "each model's first two principal components, B's rotated onto A's (Procrustes)",
}


def embed_pair(A: np.ndarray, B: np.ndarray, *, method: str = "auto", seed: int = 42,
               n_neighbors: int = 15, min_dist: float = 0.1,
               progress: bool = False) -> Embedding:
    """2-D maps of A and B (see module docstring); ``auto`` is :data:`DEFAULT_EMBEDDING`.

    ``progress``: a bar over the epochs of ``knn_layout``, a line kept alive while
    ``aligned_umap`` runs (:func:`rdx.progress.working`)."""
    if method not in EMBEDDINGS:
        raise RDXInputError(f"embedding={method!r}; use one of {EMBEDDINGS}")
    if method == "auto":
        method = DEFAULT_EMBEDDING
    n = len(A)
    note = None
    if method == "aligned_umap":
        try:
            from umap import AlignedUMAP
        except ImportError:
            raise RDXInputError("embedding='aligned_umap' needs umap-learn: pip install "
                                "umap-learn (or use the default embedding='auto')."
                                ) from None
    if n < MIN_UMAP_IMAGES:
        note = (f"only {n} images (a UMAP layout needs at least {MIN_UMAP_IMAGES}), so the "
                "maps are PCA projections (B rotated onto A)")
    elif method == "knn_layout":
        emb = _knn_layout_pair(A, B, seed=seed, n_neighbors=n_neighbors, min_dist=min_dist,
                               progress=progress)
        if np.isfinite(emb.a).all() and np.isfinite(emb.b).all():
            return emb
        note = "the layout gave non-finite coordinates, so the maps are PCA projections"
    elif method == "aligned_umap":
        from ..progress import working

        params = {"n_components": 2, "n_neighbors": int(min(n_neighbors, n - 1)),
                  "min_dist": float(min_dist), "random_state": int(seed),
                  "alignment_window_size": 1}
        try:
            with warnings.catch_warnings(), \
                    working(f"explorer: AlignedUMAP of {n} images (umap-learn; about a "
                            "minute)", show=progress):
                # "n_jobs value 1 overridden to 1 by setting random_state": expected
                warnings.filterwarnings("ignore", message=".*n_jobs.*")
                model = AlignedUMAP(**params).fit(
                    [np.asarray(A, np.float32), np.asarray(B, np.float32)],
                    relations=[{i: i for i in range(n)}])
            Ya, Yb = _normalise(*(np.asarray(e, np.float64) for e in model.embeddings_))
            if np.isfinite(Ya).all() and np.isfinite(Yb).all():
                return Embedding(Ya, Yb, "aligned_umap", params, None, LABELS["aligned_umap"])
            note = "AlignedUMAP gave non-finite coordinates, so the maps are PCA projections"
        except (ValueError, TypeError, np.linalg.LinAlgError) as exc:
            # degenerate inputs (e.g. many identical images): still show the data
            note = (f"AlignedUMAP failed ({type(exc).__name__}: {exc}), so the maps are "
                    "PCA projections (B rotated onto A)")
    Ya, Yb = _normalise(*pca_pair(A, B))
    return Embedding(Ya, Yb, "pca", {"components": 2, "alignment": "orthogonal_procrustes"},
                     note, LABELS["pca"])


def _embedding_key(A: np.ndarray, B: np.ndarray, method: str, seed: int, n_neighbors: int,
                   min_dist: float) -> str:
    from importlib.metadata import PackageNotFoundError, version

    from ..io import array_digest, json_digest
    try:
        umap_version = version("umap-learn")
    except PackageNotFoundError:
        umap_version = None
    method = DEFAULT_EMBEDDING if method == "auto" else method
    return json_digest({"features": array_digest(np.asarray(A), np.asarray(B)),
                        "method": method, "seed": int(seed), "n_neighbors": int(n_neighbors),
                        "min_dist": float(min_dist),
                        # umap-learn's version matters only to its own layout
                        "umap": umap_version if method == "aligned_umap" else None,
                        "layout": (KNN_LAYOUT_VERSION, KNN_LAYOUT_PARAMS)
                        if method == "knn_layout" else None})[:16]


def cached_embed_pair(A: np.ndarray, B: np.ndarray, folder: str | Path | None, *,
                      method: str = "auto", seed: int = 42, n_neighbors: int = 15,
                      min_dist: float = 0.1, on_compute: Callable[[], None] | None = None,
                      progress: bool = False) -> tuple[Embedding, bool]:
    """:func:`embed_pair`, read from ``folder`` when the same maps were computed before.

    Returns the embedding and whether it came from the cache. A damaged or foreign cache
    file is ignored and rewritten (atomically); ``folder=None`` never caches.
    ``on_compute`` is called before the maps are computed (a progress line).
    """
    from ..io import optional_writes, save_npz_atomic

    if folder is None:
        if on_compute is not None:
            on_compute()
        return embed_pair(A, B, method=method, seed=seed, n_neighbors=n_neighbors,
                          min_dist=min_dist, progress=progress), False
    key = _embedding_key(A, B, method, seed, n_neighbors, min_dist)
    path = Path(folder) / f"explorer_embedding_{key}.npz"
    if path.is_file():
        try:
            with np.load(path) as z:
                meta = json.loads(str(z["meta"]))
                emb = Embedding(z["a"], z["b"], meta["method"], meta["params"], meta["note"],
                                meta.get("label") or LABELS.get(meta["method"], ""))
            if emb.a.shape == (len(A), 2) and emb.b.shape == (len(B), 2):
                return emb, True
        except (OSError, ValueError, KeyError):
            pass   # rewritten below
    if on_compute is not None:
        on_compute()
    emb = embed_pair(A, B, method=method, seed=seed, n_neighbors=n_neighbors,
                     min_dist=min_dist, progress=progress)
    meta = json.dumps({"method": emb.method, "params": emb.params, "note": emb.note,
                       "label": emb.label})
    try:
        with optional_writes():   # a cache: the page is made without it
            save_npz_atomic(path, a=emb.a, b=emb.b, meta=np.asarray(meta))
    except OSError:
        pass   # a read-only comparison folder: the page is still built, just not cached
    return emb, False
