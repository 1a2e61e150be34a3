"""Neighbourhood similarity measures: mutual k-NN, Jaccard k-NN and CKNNA.

All three compare, image by image, the k nearest neighbours of that image in X and in Y.
Neighbours are taken by **cosine similarity** (the rows are L2-normalised first, as Huh et al.
2024 do before every metric), the image itself is excluded, and ties are broken by the
smaller image index. Let ``N_k^X(i)`` be the neighbour set of image i in X and
``m_i = |N_k^X(i) ∩ N_k^Y(i)|``.

* **mutual k-NN** (Huh et al. 2024): ``(1/n) Σ_i m_i / k`` ∈ [0, 1]; ``m_i / k`` per image is
  :func:`mutual_knn_per_image` (the local agreement map).
* **Jaccard k-NN** (Klabunde et al.'s ReSi): ``(1/n) Σ_i m_i / (2k − m_i)`` ∈ [0, 1].
* **CKNNA** (centred kernel nearest-neighbour alignment; Huh et al. 2024, App. A), with the
  cosine kernel ``K_ij = ⟨x̂_i, x̂_j⟩`` (``L`` likewise for Y) and row-centred entries
  ``K_ij − μ^K_i``::

      Align(K, L) = Σ_i Σ_j α_ij (K_ij − μ^K_i)(L_ij − μ^L_i),
      α_ij = 1[i ≠ j, j ∈ N_k^X(i), j ∈ N_k^Y(i)],
      CKNNA = Align(K, L) / √(Align(K, K) · Align(L, L)),

  where ``Align(K, K)`` uses ``α_ij = 1[i ≠ j, j ∈ N_k^X(i)]``. The row mean ``μ^K_i`` (the
  paper's ``E_l[⟨φ_i, φ_l⟩]``) is taken over the other n − 1 images (self excluded, like
  everywhere in these measures; including it would shift μ by ``(1 − μ_i)/n``).
  |CKNNA| ≤ 1 by Cauchy–Schwarz and CKNNA(X, X) = 1. This is the paper's formula; the
  authors' code (``platonic-rep/metrics.py``) instead applies Song's unbiased-HSIC formula to
  the masked, non-symmetric kernels ``mask ⊙ K`` and adds 1e-6 to the denominator, which is
  a different number (it is not implemented here).

Computation (never a dense n×n matrix or mask): row blocks of cosine similarities are
computed by a GEMM and reduced with ``torch.topk`` to ``k + 16`` candidates per image, whose
similarities are then recomputed exactly in float64 and sorted by (similarity ↓, index ↑).
On the CPU the screening GEMM runs in float32 (about twice as fast); a rigorous float32
error bound certifies per image that no non-candidate can reach the k-th similarity, and the
rare rows without that certificate are recomputed entirely in float64. So the result is the
float64 k-NN with the index tie rule, whatever the block size or search engine. The
screening search (:func:`inner_product_candidates`, shared with the large-n RDX mode's
:mod:`rdx.method.knn_search`) is torch's blocked GEMM + topk (GPU when the inputs are there)
or, from n = 20 000 on the CPU, faiss's exact inner-product index (``pip install
faiss-cpu``). Memory: O(n·k) plus one bounded block (faiss: plus a float32 copy of the
representation). Set intersections use one sort of the 2k concatenated neighbour ids per
row. Cost: one n×n×d GEMM per representation. (The platonic-rep reference code argsorts full
n×n similarity matrices and builds two dense n×n float masks per call — about 11 n×n
buffers for CKNNA — which caps n far below what fits here.)

Calibration (see :mod:`rdx.similarity.calibration`): a permutation of Y's rows just relabels
its neighbour lists, so null draws cost O(n·k) each (with exactly tied similarities the
relabelled lists keep the tie order of the original ids, where a recomputation would order
ties by the permuted ids). The bootstrap keeps the neighbour graphs
of all n images fixed and resamples the images whose neighbourhoods are compared (each
image's score weighted by how often it was drawn). Resampling rows and recomputing the
graphs would make copies of an image each other's nearest neighbours (similarity 1 in both
X and Y, inflating every score) and would search neighbours among only ~63 % distinct images,
which widens every neighbourhood and shifts the score; the fixed-graph bootstrap has neither
problem and costs O(n) per draw, but it does not include the variability of the graphs
themselves, so its intervals are conditional on them.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..errors import RDXInputError
from .inputs import BLOCK_BYTES, as_tensor_pair, block_rows, check_k

#: Extra candidates taken by the screening top-k beyond k.
CANDIDATE_MARGIN = 16
#: Screening engines (see :func:`inner_product_candidates`).
KNN_ENGINES = ("torch", "faiss")
#: From this n on, ``engine="auto"`` screens with faiss (when installed, on the CPU): its
#: exact inner-product search is faster than torch's GEMM + topk there.
FAISS_MIN_N = 20_000


def import_faiss() -> Any:
    """The faiss module, or an input error saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise RDXInputError("engine='faiss' needs the faiss package: pip install faiss-cpu "
                            "(or faiss-gpu), or use engine='torch'.") from None
    return faiss


def resolve_engine(engine: str, n: int, device: torch.device) -> str:
    """``auto`` → ``faiss`` for n ≥ :data:`FAISS_MIN_N` on the CPU when faiss is installed,
    else ``torch``. An explicit ``faiss`` that is not installed is an input error."""
    if engine not in ("auto", *KNN_ENGINES):
        raise RDXInputError(f"unknown k-NN engine {engine!r}; use 'auto', 'torch' or 'faiss'.")
    if engine == "auto":
        if n < FAISS_MIN_N or device.type != "cpu":
            return "torch"
        try:
            import faiss  # noqa: F401
        except ImportError:
            return "torch"
        return "faiss"
    if engine == "faiss":
        import_faiss()
    return engine


def inner_product_candidates(Z: torch.Tensor, c: int, *, block: int, engine: str = "torch"
                             ) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """For row blocks ``s:e`` of ``Z`` (n × d; float32 for faiss), the ``c`` largest inner
    products of each row with the other rows (self excluded): yields ``(s, e, values, ids)``,
    values descending (ties in any order: callers re-rank the candidates exactly).

    ``torch``: a GEMM per block of ``block`` rows and ``torch.topk`` (on Z's device);
    ``faiss``: an exact ``IndexFlatIP`` search of all rows (faiss blocks internally and
    holds a float32 copy of Z), then the same blocks.
    """
    n = Z.shape[0]
    if engine == "faiss":
        faiss = import_faiss()
        Zn = np.ascontiguousarray(Z.detach().cpu().numpy(), dtype=np.float32)
        ix = faiss.IndexFlatIP(Zn.shape[1])
        ix.add(Zn)
        Dv, Iv = ix.search(Zn, c + 1)
        del ix
        own = Iv == np.arange(n)[:, None]
        own[~own.any(axis=1), -1] = True    # self not returned (exact duplicates): drop last
        Iv = Iv[~own].reshape(n, c)
        Dv = Dv[~own].reshape(n, c)
        for s in range(0, n, block):
            e = min(n, s + block)
            yield (s, e, torch.from_numpy(Dv[s:e]).to(Z.device),
                   torch.from_numpy(Iv[s:e].astype(np.int64)).to(Z.device))
        return
    for s in range(0, n, block):
        e = min(n, s + block)
        rows = torch.arange(e - s, device=Z.device)
        S = Z[s:e] @ Z.T
        S[rows, rows + s] = -torch.inf
        cv, ci = torch.topk(S, c, dim=1)
        del S
        yield s, e, cv, ci


def unit_rows(Z: torch.Tensor, *, name: str, what: str) -> torch.Tensor:
    """Rows scaled to unit L2 norm (float64); a zero row makes cosine undefined."""
    norms = torch.linalg.vector_norm(Z, dim=1)
    bad = torch.nonzero(norms == 0).flatten()
    if len(bad):
        raise RDXInputError(
            f"{what}: image {int(bad[0])} of {name} is the zero vector ({len(bad)} such "
            "images), so its cosine neighbours are undefined; remove those images.")
    return Z / norms[:, None]


def _gemm_error_bound(d: int, dtype: torch.dtype) -> float:
    """Bound on |fl(x̂·ŷ) − x̂·ŷ| for unit vectors of length d in ``dtype`` (inputs rounded
    to ``dtype`` included): γ_{d+3} = (d+3)u / (1 − (d+3)u), doubled for safety."""
    u = 2.0 ** -24 if dtype == torch.float32 else 2.0 ** -53
    m = (d + 3) * u
    return 2.0 * m / (1.0 - m)


def _stable_topk_desc(values: torch.Tensor, ids: torch.Tensor, k: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row the k largest ``values`` with ties broken by smaller ``ids``."""
    ids_sorted, o1 = torch.sort(ids, dim=1)
    v = values.gather(1, o1)
    v_sorted, o2 = torch.sort(v, dim=1, descending=True, stable=True)
    return v_sorted[:, :k], ids_sorted.gather(1, o2)[:, :k]


def knn_cosine(Z: torch.Tensor, k: int, *, name: str = "X", what: str = "kNN",
               engine: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k nearest neighbours by cosine similarity (self excluded), chunked.

    Parameters
    ----------
    Z : torch.Tensor (n, d), float64 (validated)
    k : int, 1 <= k <= n − 1
    engine : {"auto", "torch", "faiss"}
        Screening search (:func:`inner_product_candidates`): torch's
        blocked GEMM + topk, or faiss's exact inner-product index (``auto``: faiss from
        n = 20 000 on the CPU when installed). The result does not depend on it: candidates
        are re-ranked in float64 and certified either way.

    Returns
    -------
    idx : LongTensor (n, k)
        Neighbour ids, most similar first, ties by smaller id.
    sims : float64 tensor (n, k)
        Their cosine similarities.
    mu : float64 tensor (n,)
        Mean cosine similarity of each image to the other n − 1 images.
    """
    n, d = Z.shape
    Zn = unit_rows(Z, name=name, what=what)
    total = Zn.sum(dim=0)
    mu = (Zn @ total - (Zn * Zn).sum(dim=1)) / (n - 1)
    screen_dtype = torch.float32 if Z.device.type == "cpu" else torch.float64
    Zs = Zn.to(screen_dtype)
    eps = _gemm_error_bound(d, screen_dtype)
    c = min(k + CANDIDATE_MARGIN, n - 1)
    b = min(block_rows(n, Zs.element_size()), block_rows(c * d), n)
    b = max(1, b)
    idx = torch.empty((n, k), dtype=torch.long, device=Z.device)
    sims = torch.empty((n, k), dtype=torch.float64, device=Z.device)
    engine = resolve_engine(engine, n, Z.device) if screen_dtype == torch.float32 else "torch"
    for s, e, cv, ci in inner_product_candidates(Zs, c, block=b, engine=engine):
        exact = torch.bmm(Zn[ci], Zn[s:e, :, None]).squeeze(2)    # (b, c) float64
        v, ids = _stable_topk_desc(exact, ci, k)
        sims[s:e], idx[s:e] = v, ids
        if c < n - 1:
            # certificate: every non-candidate j has screened value ≤ cv[:, -1], so its
            # exact value is ≤ cv[:, -1] + eps; it cannot reach the k-th value if this is
            # strictly below it.
            bad = torch.nonzero(cv[:, -1].to(torch.float64) + eps >= v[:, -1]).flatten()
            if len(bad):
                r = bad + s
                S64 = Zn[r] @ Zn.T
                S64[torch.arange(len(r), device=Z.device), r] = -torch.inf
                all_ids = torch.arange(n, device=Z.device).expand(len(r), n)
                v2, i2 = _stable_topk_desc(S64, all_ids, k)
                sims[r], idx[r] = v2, i2
    return idx, sims, mu


def _pair_stats(idx_x: torch.Tensor, cx: torch.Tensor, idx_y: torch.Tensor,
                cy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image: overlap ``m_i`` and ``Σ_{j ∈ N^X ∩ N^Y} cx_ij · cy_ij``.

    ``cx``/``cy`` are the (centred) kernel values of the neighbours in ``idx_x``/``idx_y``.
    The 2k ids of a row are sorted together; as each list has distinct ids, every pair of
    equal neighbours in sorted order is one id from X and the same id from Y.
    """
    n, k = idx_x.shape
    overlap = torch.empty(n, dtype=torch.float64, device=idx_x.device)
    cross = torch.empty(n, dtype=torch.float64, device=idx_x.device)
    step = max(1, BLOCK_BYTES // (8 * 2 * k * 4))
    for s in range(0, n, step):
        e = min(n, s + step)
        ids, order = torch.sort(torch.cat([idx_x[s:e], idx_y[s:e]], dim=1), dim=1)
        vals = torch.cat([cx[s:e], cy[s:e]], dim=1).gather(1, order)
        eq = ids[:, 1:] == ids[:, :-1]
        overlap[s:e] = eq.sum(dim=1).to(torch.float64)
        cross[s:e] = (vals[:, 1:] * vals[:, :-1] * eq).sum(dim=1)
    return overlap, cross


MEASURES = ("mutual_knn", "jaccard_knn", "cknna")


class NeighborTable:
    """One representation's k-NN table: what every neighbourhood measure needs of it.

    Attributes: ``idx`` (n, k) neighbour ids, ``c`` (n, k) their row-centred cosine
    similarities ``K_ij − μ^K_i``, ``self_align`` (n,) per-image ``Σ_j c_ij²``, and ``k``.
    Built once per representation, it serves every pair it is part of (the model × model
    matrices of :mod:`rdx.similarity.matrix`).
    """

    def __init__(self, Z: torch.Tensor, k: int, *, name: str, what: str):
        with torch.no_grad():
            self.idx, sims, mu = knn_cosine(Z.detach(), k, name=name, what=what)
            self.c = sims - mu[:, None]
            self.self_align = (self.c * self.c).sum(dim=1)
        self.k = k


_WHAT = {"mutual_knn": "mutual k-NN", "jaccard_knn": "Jaccard k-NN", "cknna": "CKNNA"}


def neighbor_table(Z: Any, k: Any, measure: str, *, name: str = "X") -> NeighborTable:
    """Validated :class:`NeighborTable` of one representation (n ≥ 4, 1 ≤ k ≤ n − 1)."""
    what = _WHAT[measure]
    Z, _, _ = as_tensor_pair(Z, Z, what=what, min_n=4)
    return NeighborTable(Z, check_k(k, Z.shape[0], what=what), name=name, what=what)


class NeighborPrepared:
    """k-NN tables of X and Y, for the value, row permutations of Y and bootstrap weights."""

    def __init__(self, X: Any, Y: Any, k: Any, measure: str):
        what = _WHAT[measure]
        X, Y, _ = as_tensor_pair(X, Y, what=what, min_n=4)
        k = check_k(k, X.shape[0], what=what)
        self._init(NeighborTable(X, k, name="X", what=what),
                   NeighborTable(Y, k, name="Y", what=what), measure)

    @classmethod
    def from_tables(cls, tx: NeighborTable, ty: NeighborTable, measure: str
                    ) -> NeighborPrepared:
        """The measure of two representations from their (validated) tables."""
        if tx.k != ty.k or tx.idx.shape != ty.idx.shape:
            raise RDXInputError(f"{_WHAT[measure]}: the two k-NN tables differ in n or k "
                                f"({tuple(tx.idx.shape)} vs {tuple(ty.idx.shape)}).")
        obj = cls.__new__(cls)
        obj._init(tx, ty, measure)
        return obj

    def _init(self, tx: NeighborTable, ty: NeighborTable, measure: str) -> None:
        self.k, self.measure, self.what = tx.k, measure, _WHAT[measure]
        self.ix, self.cx, self.self_x = tx.idx, tx.c, tx.self_align
        self.iy, self.cy, self.self_y = ty.idx, ty.c, ty.self_align
        with torch.no_grad():
            self.overlap, self.cross = _pair_stats(self.ix, self.cx, self.iy, self.cy)
        self.value = self._aggregate(self.overlap, self.cross, None)

    def per_image(self) -> np.ndarray:
        return (self.overlap / self.k).cpu().numpy()

    def _aggregate(self, overlap: torch.Tensor, cross: torch.Tensor,
                   w: torch.Tensor | None) -> float:
        def wsum(v: torch.Tensor) -> torch.Tensor:
            return v.sum() if w is None else (w * v).sum()

        wtot = float(overlap.numel()) if w is None else float(w.sum())
        if self.measure == "mutual_knn":
            return float(wsum(overlap)) / (self.k * wtot)
        if self.measure == "jaccard_knn":
            return float(wsum(overlap / (2 * self.k - overlap))) / wtot
        sxx, syy = float(wsum(self.self_x)), float(wsum(self.self_y))
        if not (sxx > 0 and syy > 0):
            raise RDXInputError(
                "CKNNA is undefined for these inputs: the centred kernel values of every "
                "image's neighbours equal its mean similarity (Align(K,K)="
                f"{sxx:.3g}, Align(L,L)={syy:.3g}); the neighbourhoods carry no contrast.")
        return float(wsum(cross)) / float(np.sqrt(sxx * syy))

    def permuted(self, perm: np.ndarray) -> float:
        """The measure of X and ``Y[perm]``: Y's neighbour lists relabelled, O(n·k)."""
        with torch.no_grad():
            p = torch.as_tensor(perm, device=self.iy.device)
            inv = torch.empty_like(p)
            inv[p] = torch.arange(len(p), device=p.device)
            iy = inv[self.iy[p]]
            cy = self.cy[p]
            overlap, cross = _pair_stats(self.ix, self.cx, iy, cy)
            if self.measure == "cknna":
                # Align(L, L) of the permuted Y is the same sum, reordered
                return float(cross.sum()) / float(np.sqrt(float(self.self_x.sum())
                                                          * float(self.self_y.sum())))
            return self._aggregate(overlap, cross, None)

    def bootstrap(self, idx: np.ndarray) -> float:
        """Fixed-graph bootstrap: image scores weighted by their draw counts (see module)."""
        w = torch.as_tensor(np.bincount(np.asarray(idx), minlength=len(self.overlap)),
                            dtype=torch.float64, device=self.overlap.device)
        return self._aggregate(self.overlap, self.cross, w)


def _prepare(measure: str) -> Any:
    def prepare(X: Any, Y: Any, *, k: int = 10) -> NeighborPrepared:
        return NeighborPrepared(X, Y, k, measure)
    return prepare


_prepare_mutual_knn = _prepare("mutual_knn")
_prepare_jaccard_knn = _prepare("jaccard_knn")
_prepare_cknna = _prepare("cknna")


def mutual_knn(X: Any, Y: Any, *, k: int = 10) -> float:
    """Mutual k-NN alignment: mean over images of ``|N_k^X(i) ∩ N_k^Y(i)| / k``.

    Parameters
    ----------
    X, Y : array-like or torch.Tensor of shape (n, p), (n, q)
        Representations of the same n ≥ 4 images; no image may be the zero vector.
    k : int, default=10
        Neighbours per image, 1 <= k <= n − 1 (cosine similarity, self excluded).

    Returns
    -------
    float in [0, 1]; higher is more similar. Chance level for unrelated representations is
    about k/(n − 1).
    """
    return NeighborPrepared(X, Y, k, "mutual_knn").value


def mutual_knn_per_image(X: Any, Y: Any, *, k: int = 10) -> np.ndarray:
    """Per-image local agreement ``a_i = |N_k^X(i) ∩ N_k^Y(i)| / k`` (float64, shape (n,));
    the images with the lowest values are where the two representations disagree most."""
    return NeighborPrepared(X, Y, k, "mutual_knn").per_image()


def jaccard_knn(X: Any, Y: Any, *, k: int = 10) -> float:
    """Jaccard k-NN similarity: mean over images of ``|N^X ∩ N^Y| / |N^X ∪ N^Y|``.

    Same neighbourhoods and parameters as :func:`mutual_knn`; float in [0, 1], higher is
    more similar.
    """
    return NeighborPrepared(X, Y, k, "jaccard_knn").value


def cknna(X: Any, Y: Any, *, k: int = 10) -> float:
    """CKNNA (Huh et al. 2024): CKA restricted to mutual k-NN pairs, cosine kernel.

    See the module docstring for the exact formula. Float in [−1, 1]; higher is more
    similar; 1 for identical neighbourhoods and kernels.

    Raises
    ------
    RDXInputError
        Bad input or k, a zero row, or neighbourhoods without contrast (Align(K,K) = 0).
    """
    return NeighborPrepared(X, Y, k, "cknna").value
