"""Large-n RDX: the difference affinity as all-ones, a sparse correction on K-NN graphs and a
low-rank sketch of the far pairs.

The exact method (``graph="dense"``) holds two n×n matrices: about 13 GB at n = 40 000 and
80 GB at 100 000. ``graph="knn"`` never forms an n×n matrix.

**Near pairs, exactly.** For images i ≠ j, let ``E`` be the pairs where at least one model
ranks j among i's K nearest neighbours (``R_A[i,j] ≤ K`` or ``R_B[i,j] ≤ K``): the union of
the two directed K-NN graphs, at most 2K pairs per row. A row block of squared distances of
both models is computed once (:class:`rdx.method.knn_search.Features`); its top-K gives each
model's neighbours with their ranks, and the rank of the other model's neighbours (which may
be far, e.g. rank 40 000) is counted exactly by binary search in the sorted row (ties by
index, the dense rule). Cost: two GEMMs and two row sorts of n×n entries in blocks, O(n² d)
time and O(n K) memory — no estimate, so no estimation error. With ``C[i,j] =
exp(∓β·diff[i,j]) − 1`` on ``E`` (0 elsewhere and on the diagonal) and ``C_s = (C + Cᵀ)/2``.

**Far pairs.** For a pair outside ``E`` both ranks exceed K, so ``min(R_A, R_B) + 1 ≥ K + 2``
and ``|R_A − R_B| ≤ n − K − 2``: its locally biased difference is at most ``t_K = tanh(γ (n −
K − 2)/(K + 2))`` in absolute value, below ``tanh(80/K)`` with the default γ = 80/n. Each is
weak, but there are ~n² of them, and their sum can form a diffuse cluster (mean affinity just
above 1, flagged ``low_affinity``) that the dense method reports and the graph alone cannot
see (on the validation data a cluster of 835 of 10 000 images, missed by the graph alone).
The far part ``F = S − 11ᵀ − C_s`` of the symmetrised affinity is therefore modelled from
``m`` landmark images L (``n_landmarks``, drawn with the fit's seed): the same blocked pass
gives the exact ranks, in both models, of every pair (i, L_c) (binary search of the landmark
columns in the sorted rows) and (L_c, i) (a stable sort of each landmark's whole row), so
``F[:, L]`` is exact; the Nyström formula ``F ≈ F[:, L] W⁺ F[L, :]``, ``W = F[L, L]``,
truncated to the ``r = min(100, m // 10)`` largest-|λ| eigenpairs of ``W`` (the full
pseudo-inverse amplifies W's many near-zero eigenvalues), gives ``G Λ⁻¹ Gᵀ`` with ``G =
F[:, L] V_r`` (:class:`FarSketch`). With every image a landmark and no truncation it is exact
(tested: the fit equals the dense one at K = 12); with ``m = 0`` far pairs are neutral
(affinity 1, the value of a pair both models agree on). With ``K = n − 1`` there are no far
pairs and the result equals the dense method.

**Affinity operator.** ``S = 11ᵀ + C_s + G Λ⁻¹ Gᵀ``: a product costs one sparse product, a
sum and two thin products, ``S v = (Σ v) 1 + C_s v + G Λ⁻¹ (Gᵀ v)``; degrees are ``S 1``
(a sketch that makes one ≤ 0 is dropped and recorded). The top eigenvectors of ``D^{-1/2} S
D^{-1/2}`` come from Lanczos (ARPACK ``eigsh``, same start vector, tolerance, √degree
scaling, sign rule and k-means as :mod:`rdx.method.spectral`), cluster mean affinities from
``|c||c'| + Yᵀ C_s Y + (YᵀG) Λ⁻¹ (YᵀG)ᵀ``.

**Grids** use the same rules as the dense path (:mod:`rdx.method.grids`): a member's
neighbourhood of the ``grid_size`` nearest members is read from its K-NN list in the
tight model when that list holds enough members (otherwise the distances to the cluster's
members are computed), and affinities of grid pairs are ``1 + C`` plus the sketch's entries.

**Choosing K and m.** Larger K and m are closer to the exact method; memory ≈ 128·n·K bytes
for the graph plus 12·n·m for the sketch; the search and rank counting cost O(n² d) whatever
K. Default (``n_neighbors="auto"``): K = min(200, n − 1) (:data:`DEFAULT_N_NEIGHBORS`) with
m = 1000 (:data:`DEFAULT_N_LANDMARKS`): n = 100 000 fits in about 6 GB. ``"null"``: the
smallest K at which no far pair can reach the null threshold on its own, ``e^{β t_K} ≤
null_threshold`` (:func:`null_threshold_neighbors`: 821 at n = 5 000, 973 at 100 000), for
when every strong pair must be exact. The K used is recorded as
``info["knn_graph"]["n_neighbors"]``, the sketch as ``info["knn_graph"]["far_sketch"]``.
Validated against the dense method on Fashion-MNIST ConvNet features at n = 5k–20k by
``benchmarks/bench_large_n.py`` (adjusted Rand index of the partitions against several
dense seeds, grid overlap, BSR and known-difference hits; numbers in the README).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
import torch
from tqdm.auto import tqdm

from ..backend import available_memory_bytes, format_bytes, seed_everything
from ..errors import RDXInputError
from ..progress import working
from ..results.types import DIRECTIONS, DirectionResult
from .clustering import explanations_of, union_mean
from .geometry import LOW32, neighbor_keys_numpy, squared_distances_between, to_device_centered
from .graphs import DIRECTION_SIGN, resolve_gamma
from .grids import select_grid
from .knn_search import (DistanceBlock, Features, block_rows, device_block_rows,
                         row_blocks)
from .knn_options import (AUTO_N_NEIGHBORS, DEFAULT_N_NEIGHBORS, NULL_N_NEIGHBORS,
                          null_threshold_neighbors, resolve_n_neighbors)
from .spectral import ARPACK_TOL, kmeans, sign_flip

#: exp() of float32 overflows above ~88 (the dense path refuses at the same bound).
_MAX_EXPONENT = 80.0
#: Relative tolerance under which two neighbourhood scores count as tied (as in grids.py).
_SCORE_RTOL = 1e-9
#: Bytes per union pair for the memory estimate: cols, two ranks, diff (16), the direction's
#: correction matrix (12), the symmetrised one (≤ 2 entries per pair, 24) and its transposed
#: temporary (12).
_BYTES_PER_PAIR = 64
#: Fixed workspace: k-means, Lanczos vectors, grid chunks.
_FIXED_BYTES = 64 * 2**20
#: Most eigenpairs of the landmark block kept by the far-pair sketch (:func:`sketch_rank`).
_SKETCH_MAX_RANK = 100
#: Eigenvalues of the landmark block below this fraction of the largest |λ| are rounding.
_SKETCH_EIG_RTOL = 1e-9


# ----------------------------------------------------------------------------- checks
def estimate_knn_memory(n: int, d: int, n_neighbors: int, n_landmarks: int = 0) -> int:
    """Peak bytes of a K-NN fit: centred features of both models (plus the float64
    temporary of centring), the union graph and its sparse affinities, the block workspace,
    and with ``n_landmarks`` = m the sketch (two n × m float32 difference arrays, the
    direction's n × m far columns and its n × r factor)."""
    pairs = 2 * n * n_neighbors
    workspace = 2 * 12 * n * block_rows(n)   # per model: float32 block + int64 sorted keys
    m = min(n_landmarks, n)
    sketch = 12 * n * m + 8 * n * min(m, _SKETCH_MAX_RANK)
    return int(12 * n * d + pairs * _BYTES_PER_PAIR + 2 * 4 * n * n_neighbors + workspace
               + sketch + _FIXED_BYTES)


def check_knn_memory(n: int, d: int, n_neighbors: int, device: torch.device,
                     n_landmarks: int = 0) -> None:
    """Refuse before the pass when the graph (host memory) or, on a GPU, the features and
    distance blocks (device memory) would not fit."""
    need = estimate_knn_memory(n, d, n_neighbors, n_landmarks)
    avail = available_memory_bytes(torch.device("cpu"))
    if need > 0.9 * avail:
        sketch = (f", n_landmarks={n_landmarks} (the far-pair sketch: ≈ 12·n·m bytes)"
                  if n_landmarks else "")
        raise RDXInputError(
            f"graph='knn' with n={n} images and n_neighbors={n_neighbors}{sketch} needs about "
            f"{format_bytes(need)} of memory (≈ {_BYTES_PER_PAIR} bytes per pair of the "
            f"2·n·K-pair graph, plus features), but only {format_bytes(avail)} is available. "
            f"Use fewer neighbours ({_fitting_k_hint(n, d, avail, n_landmarks)}memory grows "
            "with n·n_neighbors), fewer landmarks, or subsample the images.")
    if device.type == "cuda":
        # per model: block, keys and torch.sort's output (4 + 8 + 8 bytes per entry)
        need_gpu = 4 * n * d + 2 * 20 * n * device_block_rows(n, device) + _FIXED_BYTES
        avail_gpu = available_memory_bytes(device)
        if need_gpu > 0.9 * avail_gpu:
            raise RDXInputError(
                f"graph='knn' on the GPU needs about {format_bytes(need_gpu)} of GPU memory "
                f"for n={n} images (features and distance blocks), but only "
                f"{format_bytes(avail_gpu)} is free; use device='cpu' or subsample.")


def _fitting_k_hint(n: int, d: int, avail: int, n_landmarks: int = 0) -> str:
    """``"n_neighbors=K fits; "`` for the largest K whose estimate is within 90 % of
    ``avail`` (the estimate is affine in K), or ``""`` when not even K = 2 fits."""
    base = estimate_knn_memory(n, d, 0, n_landmarks)
    per_k = estimate_knn_memory(n, d, 1, n_landmarks) - base
    k = int((0.9 * avail - base) // per_k)
    return f"n_neighbors={min(k, n - 1)} fits; " if k >= 2 else ""


# ----------------------------------------------------------------------------- the graph
@dataclass
class UnionGraph:
    """The union ``E`` of both models' directed K-NN graphs, rows in CSR order.

    ``indptr`` (n+1), ``cols`` (int32, sorted within each row), ``rank_a``/``rank_b`` (int32,
    exact 0-based neighbour ranks of the pair in each model), ``neighbors_a``/``neighbors_b``
    (n × K int32: each image's K nearest others per model, nearest first, ties by index).

    With landmarks (the far-pair sketch): ``landmarks`` (m sorted image ids), ``far_out``
    (n × m float32: locally biased difference of the pair (i, L[c]) from exact ranks) and
    ``far_in`` (m × n: of the pair (L[c], i)); NaN where the pair is in ``E`` or i = L[c].
    """

    n: int
    n_neighbors: int
    indptr: np.ndarray
    cols: np.ndarray
    rank_a: np.ndarray
    rank_b: np.ndarray
    neighbors_a: np.ndarray
    neighbors_b: np.ndarray
    landmarks: np.ndarray | None = None
    far_out: np.ndarray | None = None
    far_in: np.ndarray | None = None

    @property
    def n_pairs(self) -> int:
        return int(len(self.cols))

    def rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.indptr))


def build_union_graph(XA: torch.Tensor, XB: torch.Tensor, n_neighbors: int, *,
                      landmarks: np.ndarray | None = None, gamma: float | None = None,
                      progress: bool = False, torch_sort: bool | None = None,
                      executor: Any = None) -> UnionGraph:
    """Both models' K-NN lists and the exact ranks of every union pair, in one blocked pass.

    ``XA``, ``XB``: centred float32 features (:func:`~rdx.method.geometry.to_device_centered`)
    on the compute device. ``torch_sort``: see :class:`~rdx.method.knn_search.Features`.
    ``landmarks`` (sorted ids) and ``gamma``: also the differences of every pair between an
    image and a landmark that is off the graph (``far_out``/``far_in``), from exact ranks:
    landmark columns by binary search in the sorted rows, landmark rows by a stable sort of
    the whole row (the rank rule of the dense matrices).
    ``executor``: None (this process) or a Dask scheduler (``"local:N"``, an address or a
    ``dask.distributed.Client``): the row blocks become tasks
    (:func:`rdx.method.knn_dask.union_graph_blocks`); the graph is the same.
    """
    n, K = XA.shape[0], int(n_neighbors)
    if landmarks is not None:
        if gamma is None:
            raise ValueError("landmarks need gamma")
        landmarks = np.asarray(landmarks, dtype=np.int64)
    # the Dask tasks compute on the workers' CPUs: the CPU blocks, as a CPU pass here
    step = device_block_rows(n, XA.device if executor is None else torch.device("cpu"))
    spans = list(row_blocks(n, step))
    graph = _GraphParts(n, K, landmarks)
    if executor is not None:
        from .knn_dask import union_graph_blocks

        for part in union_graph_blocks(XA, XB, K, spans, landmarks=landmarks, gamma=gamma,
                                       executor=executor, progress=progress,
                                       torch_sort=torch_sort):
            graph.add(part)
        return graph.finish()
    FA, FB = Features(XA, torch_sort=torch_sort), Features(XB, torch_sort=torch_sort)
    for s, e in tqdm(spans, desc="K-NN graph", disable=not progress, leave=False):
        graph.add(graph_block(FA, FB, s, e, K, landmarks=landmarks, gamma=gamma))
    return graph.finish()


@dataclass
class GraphBlock:
    """What one row block ``start:end`` contributes to the :class:`UnionGraph`: both
    models' K-NN lists (b × K int32), the union pairs of each row (``counts``; ``cols``,
    ``rank_a``, ``rank_b`` in CSR order) and with landmarks the rows' ``far_out`` (b × m)
    and ``far_in[lo:hi]`` (the whole rows of the landmarks ``lo:hi`` in the block)."""

    start: int
    end: int
    neighbors_a: np.ndarray
    neighbors_b: np.ndarray
    counts: np.ndarray
    cols: np.ndarray
    rank_a: np.ndarray
    rank_b: np.ndarray
    far_out: np.ndarray | None = None
    far_in_span: tuple[int, int] = (0, 0)
    far_in: np.ndarray | None = None


def graph_block(FA: Features, FB: Features, s: int, e: int, K: int, *,
                landmarks: np.ndarray | None = None, gamma: float | None = None
                ) -> GraphBlock:
    """The rows ``s:e`` of the union graph (:class:`GraphBlock`) from one distance block
    per model: the one function of the pass, called by the local loop of
    :func:`build_union_graph` and by each Dask task (:mod:`rdx.method.knn_dask`)."""
    n, dev = FA.n, FA.X.device
    ba, bb = FA.block(s, e), FB.block(s, e)
    ia, _ = ba.topk(K)
    ib, _ = bb.topk(K)
    rb_of_a = bb.ranks_of(ia)          # B's rank of A's neighbours (exact)
    ra_of_b = ba.ranks_of(ib)          # A's rank of B's neighbours
    far: dict[str, Any] = {}
    if landmarks is not None:
        far = _far_block(ba, bb, landmarks, K, gamma)
    del ba, bb
    b = e - s
    own_b = torch.arange(1, K + 1, device=dev, dtype=torch.int64).expand(b, K)
    # A's list (all of it) and B's neighbours that A does not rank within K
    keep_b = ra_of_b > K
    cols = torch.cat([ia, ib], dim=1)
    ra = torch.cat([own_b, ra_of_b], dim=1)
    rb = torch.cat([rb_of_a, own_b], dim=1)
    valid = torch.cat([torch.ones_like(ia, dtype=torch.bool), keep_b], dim=1)
    local = torch.arange(b, device=dev)[:, None].expand(b, 2 * K)
    r = local[valid].cpu().numpy().astype(np.int64)
    c = cols[valid].cpu().numpy().astype(np.int64)
    key = r * n + c
    order = np.argsort(key, kind="stable")
    return GraphBlock(s, e, ia.cpu().numpy().astype(np.int32),
                      ib.cpu().numpy().astype(np.int32), np.bincount(r, minlength=b),
                      c[order].astype(np.int32),
                      ra[valid].cpu().numpy()[order].astype(np.int32),
                      rb[valid].cpu().numpy()[order].astype(np.int32), **far)


class _GraphParts:
    """Collects :class:`GraphBlock` s (in any order) into the :class:`UnionGraph`."""

    def __init__(self, n: int, K: int, landmarks: np.ndarray | None):
        self.n, self.K, self.landmarks = n, K, landmarks
        self.nb_a = np.empty((n, K), dtype=np.int32)
        self.nb_b = np.empty((n, K), dtype=np.int32)
        self.counts = np.zeros(n, dtype=np.int64)
        self.parts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if landmarks is not None:
            self.out = np.empty((n, len(landmarks)), dtype=np.float32)
            self.into = np.empty((len(landmarks), n), dtype=np.float32)

    def add(self, g: GraphBlock) -> None:
        s, e = g.start, g.end
        self.nb_a[s:e], self.nb_b[s:e], self.counts[s:e] = g.neighbors_a, g.neighbors_b, g.counts
        self.parts[s] = (g.cols, g.rank_a, g.rank_b)
        if self.landmarks is not None:
            self.out[s:e] = g.far_out
            lo, hi = g.far_in_span
            if hi > lo:
                self.into[lo:hi] = g.far_in

    def finish(self) -> UnionGraph:
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(self.counts, out=indptr[1:])
        parts = [self.parts[s] for s in sorted(self.parts)]   # CSR: row order
        cols, rank_a, rank_b = (np.concatenate([p[i] for p in parts]) for i in range(3))
        sketch = () if self.landmarks is None else (self.landmarks, self.out, self.into)
        return UnionGraph(self.n, self.K, indptr, cols, rank_a, rank_b, self.nb_a,
                          self.nb_b, *sketch)


def _far_difference(ra: np.ndarray, rb: np.ndarray, K: int, gamma: float) -> np.ndarray:
    """Differences of image–landmark pairs, NaN on the pairs of the union graph."""
    # ranks ≤ K (in either model, self included: rank 0) mark pairs of the graph
    d = locally_biased_difference(ra, rb, gamma)
    d[(ra <= K) | (rb <= K)] = np.nan
    return d


def _far_block(ba: DistanceBlock, bb: DistanceBlock, landmarks: np.ndarray, K: int,
               gamma: float) -> dict[str, Any]:
    """A block's part of ``far_out`` (its rows' landmark columns) and of ``far_in`` (the
    whole rows of the landmarks in the block), as :class:`GraphBlock` fields."""
    s, b = ba.start, ba.D.shape[0]
    cols = torch.as_tensor(landmarks, device=ba.D.device).expand(b, len(landmarks))
    out = _far_difference(ba.ranks_of(cols).cpu().numpy(), bb.ranks_of(cols).cpu().numpy(),
                          K, gamma)
    lo, hi = (int(i) for i in np.searchsorted(landmarks, [s, s + b]))
    into = None
    if hi > lo:                      # landmark rows in this block: their whole rows
        local = landmarks[lo:hi] - s
        into = _far_difference(ba.row_ranks(local), bb.row_ranks(local), K, gamma)
    return {"far_out": out, "far_in_span": (lo, hi), "far_in": into}


def locally_biased_difference(rank_a: np.ndarray, rank_b: np.ndarray, gamma: float
                              ) -> np.ndarray:
    """``tanh(γ (R_A − R_B)/(min(R_A, R_B) + 1))`` of the union pairs (float64)."""
    ra = rank_a.astype(np.float64)
    rb = rank_b.astype(np.float64)
    out = ra - rb
    out *= gamma
    out /= np.minimum(ra, rb) + 1.0
    return np.tanh(out, out=out)


def neglected_difference_bound(n: int, n_neighbors: int, gamma: float) -> float:
    """Largest |difference| of a pair outside the union graph, ``tanh(γ(n−K−2)/(K+2))``."""
    return float(math.tanh(gamma * max(n - n_neighbors - 2, 0) / (n_neighbors + 2)))


def correction_matrix(graph: UnionGraph, diff: np.ndarray, beta: float, direction: str
                      ) -> scipy.sparse.csr_matrix:
    """``C = A − 11ᵀ`` of a direction's (unsymmetrised) affinity, on the union pairs."""
    data = np.expm1(diff * (DIRECTION_SIGN[direction] * beta))
    C = scipy.sparse.csr_matrix((data, graph.cols, graph.indptr), shape=(graph.n, graph.n))
    C.has_sorted_indices = True
    return C


def symmetrize(C: scipy.sparse.csr_matrix) -> scipy.sparse.csr_matrix:
    """``(C + Cᵀ)/2`` as CSR (sorted indices)."""
    Cs = (C + C.T.tocsr()) * 0.5
    Cs.sort_indices()
    return Cs


# ----------------------------------------------------------------------------- far pairs
def sketch_rank(n_landmarks: int) -> int:
    """Eigenpairs kept of the landmark block: ``min(100, max(1, m // 10))``. The untruncated
    pseudo-inverse amplifies the block's many near-zero eigenvalues (partitions unrelated to
    the dense one in trials); a tenth of m kept the validation partitions stable."""
    return int(min(_SKETCH_MAX_RANK, max(1, n_landmarks // 10)))


def choose_landmarks(n: int, n_landmarks: int, seed: int) -> np.ndarray:
    """``min(n_landmarks, n)`` distinct images drawn uniformly with a local generator, sorted."""
    m = int(min(n_landmarks, n))
    return np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))


def far_columns(graph: UnionGraph, beta: float, direction: str, diff_scale: float = 1.0
                ) -> np.ndarray:
    """``F[:, L]`` (n × m float32): the symmetrised affinity minus 1 of every pair (i, L[c])
    off the graph, ``½(e^{±β d(i,L_c)} − 1) + ½(e^{±β d(L_c,i)} − 1)`` with each half 0 where
    that ordered pair is in ``E`` — exactly the part of ``S − 11ᵀ − C_s`` in these columns.
    ``diff_scale``: the divisor of ``normalize_diff``."""
    c = DIRECTION_SIGN[direction] * beta / diff_scale
    n, m = graph.far_out.shape
    out = np.empty((n, m), dtype=np.float32)
    step = max(1, 2**22 // max(m, 1))
    for a in range(0, n, step):
        b = min(n, a + step)
        half = np.nan_to_num(np.expm1(graph.far_out[a:b].astype(np.float64) * c), nan=0.0)
        half += np.nan_to_num(np.expm1(graph.far_in[:, a:b].T.astype(np.float64) * c), nan=0.0)
        out[a:b] = 0.5 * half
    return out


@dataclass
class FarSketch:
    """Nyström model ``G diag(inv) Gᵀ`` of the far part ``F = S − 11ᵀ − C_s`` (the pairs off
    the graph), from its landmark columns: ``F ≈ F[:, L] W⁺ F[L, :]`` with ``W = F[L, L]``
    truncated to its ``rank`` largest-|λ| eigenpairs, ``G = F[:, L] V_r``, ``inv = 1/λ_r``."""

    G: np.ndarray
    inv: np.ndarray

    @property
    def rank(self) -> int:
        return int(len(self.inv))

    def matmat(self, V: np.ndarray) -> np.ndarray:
        return self.G @ (self.inv[:, None] * (self.G.T @ V))


def far_sketch(F_cols: np.ndarray, landmarks: np.ndarray, rank: int | None
               ) -> FarSketch | None:
    """:class:`FarSketch` from ``F[:, L]`` (``rank`` None: every eigenpair above rounding —
    the exact Nyström formula, for tests); None when the landmark block is zero (no far
    pair among the landmarks, e.g. K = n − 1)."""
    W = F_cols[landmarks].astype(np.float64)
    W = 0.5 * (W + W.T)      # symmetric by construction; removes rounding asymmetry
    lam, V = np.linalg.eigh(W)
    top = float(np.abs(lam).max()) if len(lam) else 0.0
    if top == 0.0:
        return None
    order = np.argsort(-np.abs(lam), kind="stable")
    if rank is not None:
        order = order[:rank]
    order = order[np.abs(lam[order]) > _SKETCH_EIG_RTOL * top]
    Vr = V[:, order]
    G = np.empty((F_cols.shape[0], len(order)), dtype=np.float64)
    step = max(1, 2**22 // max(F_cols.shape[1], 1))
    for a in range(0, F_cols.shape[0], step):
        G[a:a + step] = F_cols[a:a + step].astype(np.float64) @ Vr
    return FarSketch(G, 1.0 / lam[order])


# ----------------------------------------------------------------------------- spectral
def affinity_operator(Cs: scipy.sparse.csr_matrix, scale: np.ndarray | None = None,
                      sketch: FarSketch | None = None) -> scipy.sparse.linalg.LinearOperator:
    """``diag(scale) (11ᵀ + Cs [+ sketch]) diag(scale)`` as a float64 operator (never
    formed)."""
    n = Cs.shape[0]
    sc = None if scale is None else np.asarray(scale, dtype=np.float64)[:, None]

    def matmat(V: np.ndarray) -> np.ndarray:
        V = np.asarray(V, dtype=np.float64).reshape(n, -1)
        if sc is not None:
            V = V * sc
        out = Cs @ V
        out += V.sum(axis=0, keepdims=True)
        if sketch is not None:
            out += sketch.matmat(V)
        if sc is not None:
            out *= sc
        return out

    return scipy.sparse.linalg.LinearOperator((n, n), matvec=matmat, matmat=matmat,
                                              dtype=np.float64)


def degrees(Cs: scipy.sparse.csr_matrix, sketch: FarSketch | None = None) -> np.ndarray:
    """Row sums of ``S = 11ᵀ + Cs [+ sketch]`` (without the sketch always positive: every
    entry of S is; with it, see :func:`cluster_direction_sparse`)."""
    out = Cs.shape[0] + np.asarray(Cs.sum(axis=1), dtype=np.float64).ravel()
    if sketch is not None:
        out += sketch.matmat(np.ones((Cs.shape[0], 1))).ravel()
    return out


def spectral_clustering_sparse(Cs: scipy.sparse.csr_matrix, n_clusters: int, *,
                               random_state: int = 0, n_init: int = 10,
                               sketch: FarSketch | None = None) -> np.ndarray:
    """Labels of the spectral clustering of ``S = 11ᵀ + Cs [+ sketch]``, as
    :func:`rdx.method.spectral.spectral_clustering` computes them for a dense ``S``: one
    ``RandomState`` feeds the Lanczos start vector, then k-means."""
    rs = np.random.RandomState(random_state)
    n = Cs.shape[0]
    v0 = rs.uniform(-1, 1, n)
    isd = 1.0 / np.sqrt(degrees(Cs, sketch))
    _, vecs = scipy.sparse.linalg.eigsh(affinity_operator(Cs, isd, sketch), k=n_clusters,
                                        which="LA", v0=v0, tol=ARPACK_TOL)
    emb = sign_flip(vecs[:, ::-1] * isd[:, None])
    return kmeans(emb, n_clusters, n_init=n_init, random_state=rs)


def block_sums_sparse(Cs: scipy.sparse.csr_matrix, labels: np.ndarray, n_labels: int,
                      sketch: FarSketch | None = None) -> np.ndarray:
    """``B[c, c'] = Σ_{i∈c, j∈c'} S[i, j]`` for ``S = 11ᵀ + Cs [+ sketch]`` (see
    :func:`rdx.method.clustering.block_sums`)."""
    n = Cs.shape[0]
    Y = scipy.sparse.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, n_labels))
    sizes = np.bincount(labels, minlength=n_labels).astype(np.float64)
    out = np.outer(sizes, sizes) + np.asarray((Y.T @ (Cs @ Y)).todense(), dtype=np.float64)
    if sketch is not None:
        YG = np.asarray(Y.T @ sketch.G)
        out += (YG * sketch.inv) @ YG.T
    return out


# ----------------------------------------------------------------------------- grids
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


# ----------------------------------------------------------------------------- the fit
def cluster_direction_sparse(C: scipy.sparse.csr_matrix, tight: torch.Tensor,
                             neighbors: np.ndarray, *, k: int, params: dict[str, Any],
                             sketch: FarSketch | None = None,
                             notes: dict[str, Any] | None = None) -> DirectionResult:
    """Spectral clustering, ordering, no-change group and grids of one direction — the
    steps of the dense estimator's ``_cluster_direction`` on the sparse affinity (plus the
    far-pair ``sketch``). ``notes`` receives ``sketch_rank`` (0: no sketch used)."""
    seed = int(params["random_state"])
    seed_everything(seed)   # each direction starts from the same RNG state
    Cs = symmetrize(C)
    if sketch is not None and degrees(Cs, sketch).min() <= 0:
        # every true degree is positive; a sketch that makes one ≤ 0 is unusable, and the
        # graph alone is the method's documented approximation
        sketch = None
        if notes is not None:
            notes["sketch_dropped"] = "non-positive degree with the sketch"
    if notes is not None:
        notes["sketch_rank"] = 0 if sketch is None else sketch.rank
    raw = spectral_clustering_sparse(Cs, k + 1, random_state=seed,
                                     n_init=int(params["n_init"]), sketch=sketch)
    sums = block_sums_sparse(Cs, raw, k + 1, sketch)
    del Cs
    sizes = np.bincount(raw, minlength=k + 1)
    means = np.diag(sums) / np.maximum(sizes, 1) ** 2
    # label 0 (no-change group) = lowest mean affinity; the rest ascending
    order = np.lexsort((np.arange(k + 1), means))
    low = means < float(params["null_threshold"])
    merge = bool(params["merge_low_affinity"])
    explained = [c for c in order[1:] if not (merge and low[c])]
    null_group = [c for c in order if c not in explained]
    rng = np.random.default_rng(seed)
    labels, explanations = explanations_of(
        raw, explained, means, low,
        lambda members: select_grid_sparse(members, tight, neighbors, C,
                                           size=int(params["grid_size"]),
                                           strategy=params["grid_strategy"], rng=rng,
                                           sketch=sketch))
    return DirectionResult(explanations=explanations,
                           null_members=np.flatnonzero(labels == 0).tolist(),
                           null_mean_affinity=union_mean(sums, sizes, null_group),
                           labels=labels)


def fit_knn(params: dict[str, Any], feats: dict[str, np.ndarray], *, device: torch.device,
            gamma: float | None = None) -> dict[str, Any]:
    """The K-NN-graph fit of :class:`rdx.method.estimator.RDX` (``graph="knn"``).

    Parameters
    ----------
    params : the estimator's ``get_params()``.
    feats : ``{"a": A, "b": B}`` validated float32 arrays, plus ``"a_mapped"``/``"b_mapped"``
        in aligned mode.
    device : compute device of the distance blocks.

    Returns
    -------
    dict of fitted attributes: ``directions_``, ``gamma_``, ``normalize_diff_``,
    ``n_images_``, ``timings_``, ``graph_info_``.
    """
    n = feats["a"].shape[0]
    k = int(params["n_explanations"])
    beta = float(params["beta"])
    gamma = resolve_gamma(params["gamma"], params["gamma_scale"], n) if gamma is None else gamma
    K = resolve_n_neighbors(params, n, gamma)
    normalize = bool(params["normalize_diff"]) if params["normalize_diff"] is not None \
        else False
    progress = bool(params.get("verbose"))
    aligned = "a_mapped" in feats
    timings: dict[str, float] = {}
    t = time.perf_counter()
    X = {m: to_device_centered(v, device) for m, v in feats.items()}
    pairs = ({"a_over_b": ("a", "b_mapped"), "b_over_a": ("a_mapped", "b")} if aligned
             else {"a_over_b": ("a", "b"), "b_over_a": ("a", "b")})
    directions: dict[str, DirectionResult] = {}
    info: dict[str, Any] = {
        "n_neighbors": K,
        "n_neighbors_rule": {AUTO_N_NEIGHBORS: f"auto: min({DEFAULT_N_NEIGHBORS}, n − 1)",
                             NULL_N_NEIGHBORS: "null rule"}.get(str(params["n_neighbors"]),
                                                                "given"),
        "neglected_abs_diff_bound": neglected_difference_bound(n, K, gamma),
        "n_neighbors_null_rule": null_threshold_neighbors(n, gamma, beta,
                                                          float(params["null_threshold"]))}
    n_landmarks = int(min(params.get("n_landmarks", 0), n))
    landmarks = None
    if n_landmarks:
        landmarks = choose_landmarks(n, n_landmarks, int(params["random_state"]))
        info["far_sketch"] = {"n_landmarks": n_landmarks, "max_rank": sketch_rank(n_landmarks)}
    graph = diff = None
    scale = 1.0
    for direction in DIRECTIONS:
        first, second = pairs[direction]
        if graph is None or aligned:
            graph = diff = None
            graph = build_union_graph(X[first], X[second], K, landmarks=landmarks,
                                      gamma=gamma, progress=progress,
                                      executor=params.get("executor"))
            t = _tick(timings, f"knn graph {direction}" if aligned else "knn graph", t)
            diff = locally_biased_difference(graph.rank_a, graph.rank_b, gamma)
            if normalize:   # the largest |diff| seen: graph pairs and landmark pairs
                seen = [np.abs(diff).max()] if len(diff) else []
                if landmarks is not None:
                    seen += [np.nanmax(np.abs(f), initial=0.0)
                             for f in (graph.far_out, graph.far_in)]
                scale = float(max(seen, default=0.0)) or 1.0
                diff /= scale
            peak = beta * (float(np.abs(diff).max()) if len(diff) else 0.0)
            if peak > _MAX_EXPONENT:
                raise RDXInputError(
                    f"the affinities exp(±β·diff) would reach e^{peak:.0f} and overflow: use a "
                    "smaller beta.")
            info.setdefault("union_pairs", {})[direction if aligned else "both"] = graph.n_pairs
            t = _tick(timings, f"difference {direction}" if aligned else "difference", t)
        # grids: the model where the concept is tight, original features (first of the
        # pair for a_over_b, second for b_over_a — never a mapped one)
        if direction == "a_over_b":
            tight, nbrs = X["a"], graph.neighbors_a
        else:
            tight, nbrs = X["b"], graph.neighbors_b
        notes: dict[str, Any] = {}
        # the far-pair sketch and the sparse eigensolver are opaque calls of seconds to
        # minutes: a live status line
        steps = (f"far-pair sketch ({n_landmarks} landmarks), " if landmarks is not None
                 else "") + "spectral clustering"
        with working(f"RDX knn {direction}: {steps} (n={n}, K={K})", show=progress):
            C = correction_matrix(graph, diff, beta, direction)
            sketch = None
            if landmarks is not None:
                sketch = far_sketch(far_columns(graph, beta, direction, scale), landmarks,
                                    sketch_rank(n_landmarks))
            directions[direction] = cluster_direction_sparse(C, tight, nbrs, k=k,
                                                             params=params, sketch=sketch,
                                                             notes=notes)
        if landmarks is not None:
            info["far_sketch"].setdefault("rank", {})[direction] = notes["sketch_rank"]
            if "sketch_dropped" in notes:
                info["far_sketch"].setdefault("dropped", {})[direction] = notes["sketch_dropped"]
        del C, sketch
        t = _tick(timings, direction, t)
    info["mean_pairs_per_image"] = graph.n_pairs / n
    return {"directions_": directions, "gamma_": gamma, "normalize_diff_": normalize,
            "n_images_": n, "timings_": timings, "graph_info_": info}


def _tick(timings: dict[str, float], name: str, t0: float) -> float:
    now = time.perf_counter()
    timings[name] = now - t0
    return now
