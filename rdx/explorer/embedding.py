"""Side-by-side 2-D maps of the two representations, aligned so that they can be compared.

``aligned_umap`` (default when umap-learn is installed): umap-learn's ``AlignedUMAP`` on
[A, B] with the identity relation i → i (each image is itself in both maps), seeded — the
authors' viewer's settings (15 neighbours, min_dist 0.1, alignment window 1). ``pca`` (the
fallback, flagged in the page): each representation's first two principal components, B's
map then rotated/reflected onto A's by orthogonal Procrustes so that the animated transition
shows real movement rather than an arbitrary flip. Both maps are scaled to unit RMS radius.

AlignedUMAP takes about a minute for a few thousand images; :func:`cached_embed_pair` keeps
its result in ``<folder>/explorer_embedding_<key>.npz``, keyed by the features' digest, the
method, its parameters and the umap-learn version, so that re-running a finished experiment
(or the explorer alone) does not compute the same maps again.
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

EMBEDDINGS = ("auto", "aligned_umap", "pca")
#: fewer images than this: UMAP's neighbour graph is meaningless, PCA is used
MIN_UMAP_IMAGES = 20


@dataclass
class Embedding:
    a: np.ndarray                   #: n×2
    b: np.ndarray                   #: n×2
    method: str                     #: "aligned_umap" or "pca"
    params: dict[str, Any] = field(default_factory=dict)
    note: str | None = None         #: why a fallback was used (shown in the page)


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


def embed_pair(A: np.ndarray, B: np.ndarray, *, method: str = "auto", seed: int = 42,
               n_neighbors: int = 15, min_dist: float = 0.1) -> Embedding:
    """2-D maps of A and B (see module docstring)."""
    if method not in EMBEDDINGS:
        raise RDXInputError(f"embedding={method!r}; use one of {EMBEDDINGS}")
    n = len(A)
    note = None
    if method in ("auto", "aligned_umap"):
        try:
            from umap import AlignedUMAP
        except ImportError:
            AlignedUMAP = None
            note = ("umap-learn is not installed (pip install umap-learn), so the maps are "
                    "PCA projections (B rotated onto A), not AlignedUMAP")
        if AlignedUMAP is not None and n < MIN_UMAP_IMAGES:
            note = (f"only {n} images (AlignedUMAP needs at least {MIN_UMAP_IMAGES}), so the "
                    "maps are PCA projections (B rotated onto A)")
        elif AlignedUMAP is not None:
            params = {"n_components": 2, "n_neighbors": int(min(n_neighbors, n - 1)),
                      "min_dist": float(min_dist), "random_state": int(seed),
                      "alignment_window_size": 1}
            try:
                with warnings.catch_warnings():
                    # "n_jobs value 1 overridden to 1 by setting random_state": expected
                    warnings.filterwarnings("ignore", message=".*n_jobs.*")
                    model = AlignedUMAP(**params).fit(
                        [np.asarray(A, np.float32), np.asarray(B, np.float32)],
                        relations=[{i: i for i in range(n)}])
                Ya, Yb = _normalise(*(np.asarray(e, np.float64) for e in model.embeddings_))
                if np.isfinite(Ya).all() and np.isfinite(Yb).all():
                    return Embedding(Ya, Yb, "aligned_umap", params)
                note = "AlignedUMAP gave non-finite coordinates, so the maps are PCA projections"
            except (ValueError, TypeError, np.linalg.LinAlgError) as exc:
                # degenerate inputs (e.g. many identical images): still show the data
                note = (f"AlignedUMAP failed ({type(exc).__name__}: {exc}), so the maps are "
                        "PCA projections (B rotated onto A)")
        if method == "aligned_umap" and note is not None and "not installed" in note:
            raise RDXInputError("embedding='aligned_umap' needs umap-learn: pip install "
                                "umap-learn (or use embedding='pca').")
    Ya, Yb = _normalise(*pca_pair(A, B))
    return Embedding(Ya, Yb, "pca", {"components": 2, "alignment": "orthogonal_procrustes"},
                     note)


def _embedding_key(A: np.ndarray, B: np.ndarray, method: str, seed: int, n_neighbors: int,
                   min_dist: float) -> str:
    from importlib.metadata import PackageNotFoundError, version

    from ..io import array_digest, json_digest
    try:
        umap_version = version("umap-learn")
    except PackageNotFoundError:
        umap_version = None
    return json_digest({"features": array_digest(np.asarray(A), np.asarray(B)),
                        "method": method, "seed": int(seed), "n_neighbors": int(n_neighbors),
                        "min_dist": float(min_dist), "umap": umap_version})[:16]


def cached_embed_pair(A: np.ndarray, B: np.ndarray, folder: str | Path | None, *,
                      method: str = "auto", seed: int = 42, n_neighbors: int = 15,
                      min_dist: float = 0.1, on_compute: Callable[[], None] | None = None
                      ) -> tuple[Embedding, bool]:
    """:func:`embed_pair`, read from ``folder`` when the same maps were computed before.

    Returns the embedding and whether it came from the cache. A damaged or foreign cache
    file is ignored and rewritten (atomically); ``folder=None`` never caches.
    ``on_compute`` is called before the maps are computed (a progress line).
    """
    from ..io import save_npz_atomic

    if folder is None:
        if on_compute is not None:
            on_compute()
        return embed_pair(A, B, method=method, seed=seed, n_neighbors=n_neighbors,
                          min_dist=min_dist), False
    key = _embedding_key(A, B, method, seed, n_neighbors, min_dist)
    path = Path(folder) / f"explorer_embedding_{key}.npz"
    if path.is_file():
        try:
            with np.load(path) as z:
                meta = json.loads(str(z["meta"]))
                emb = Embedding(z["a"], z["b"], meta["method"], meta["params"], meta["note"])
            if emb.a.shape == (len(A), 2) and emb.b.shape == (len(B), 2):
                return emb, True
        except (OSError, ValueError, KeyError):
            pass   # rewritten below
    if on_compute is not None:
        on_compute()
    emb = embed_pair(A, B, method=method, seed=seed, n_neighbors=n_neighbors,
                     min_dist=min_dist)
    meta = json.dumps({"method": emb.method, "params": emb.params, "note": emb.note})
    try:
        save_npz_atomic(path, a=emb.a, b=emb.b, meta=np.asarray(meta))
    except OSError:
        pass   # a read-only comparison folder: the page is still built, just not cached
    return emb, False
