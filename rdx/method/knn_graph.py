"""The union K-NN graph of large-n RDX (``graph="knn"``), built in one blocked pass.

For images i ≠ j, ``E`` holds the pairs where at least one model ranks j among i's K nearest
neighbours (``R_A[i,j] ≤ K`` or ``R_B[i,j] ≤ K``): the union of the two directed K-NN
graphs, at most 2K pairs per row. A row block of squared distances of both models is
computed once (:class:`rdx.method.knn_search.Features`); its top-K gives each model's
neighbours with their ranks, and the rank of the other model's neighbours (which may be far,
e.g. rank 40 000) is counted exactly by binary search in the sorted row (ties by index, the
dense rule). With landmarks the same pass gives the exact ranks of every pair between an
image and a landmark (the input of :mod:`rdx.method.knn_sketch`). How the graph is used:
:mod:`rdx.method.knn_fit`.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .knn_search import DistanceBlock, Features, device_block_rows, row_blocks


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
    #: seconds of each row block of the exact pass (where it ran: this process or a Dask
    #: worker), in row order; None for the approximate pass
    block_seconds: np.ndarray | None = None

    @property
    def n_pairs(self) -> int:
        return int(len(self.cols))

    def digest(self) -> str:
        """BLAKE2b (16 bytes, hex) of everything the fit reads from the graph — lists,
        pairs, both ranks and the sketch — so that two passes (one process or Dask workers,
        CPU or GPU) can be compared by their records alone."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.asarray([self.n, self.n_neighbors], dtype=np.int64).tobytes())
        for a in (self.indptr, self.cols, self.rank_a, self.rank_b, self.neighbors_a,
                  self.neighbors_b, self.landmarks, self.far_out, self.far_in):
            if a is not None:
                h.update(str((a.dtype.str, a.shape)).encode())
                h.update(memoryview(np.ascontiguousarray(a)).cast("B"))
        return h.hexdigest()

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
    #: seconds :func:`graph_block` took (on whatever ran it)
    seconds: float = 0.0


def graph_block(FA: Features, FB: Features, s: int, e: int, K: int, *,
                landmarks: np.ndarray | None = None, gamma: float | None = None
                ) -> GraphBlock:
    """The rows ``s:e`` of the union graph (:class:`GraphBlock`) from one distance block
    per model: the one function of the pass, called by the local loop of
    :func:`build_union_graph` and by each Dask task (:mod:`rdx.method.knn_dask`)."""
    t0 = time.perf_counter()
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
                      rb[valid].cpu().numpy()[order].astype(np.int32), **far,
                      seconds=time.perf_counter() - t0)


class _GraphParts:
    """Collects :class:`GraphBlock` s (in any order) into the :class:`UnionGraph`."""

    def __init__(self, n: int, K: int, landmarks: np.ndarray | None):
        self.n, self.K, self.landmarks = n, K, landmarks
        self.nb_a = np.empty((n, K), dtype=np.int32)
        self.nb_b = np.empty((n, K), dtype=np.int32)
        self.counts = np.zeros(n, dtype=np.int64)
        self.parts: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.seconds: dict[int, float] = {}
        if landmarks is not None:
            self.out = np.empty((n, len(landmarks)), dtype=np.float32)
            self.into = np.empty((len(landmarks), n), dtype=np.float32)

    def add(self, g: GraphBlock) -> None:
        s, e = g.start, g.end
        self.nb_a[s:e], self.nb_b[s:e], self.counts[s:e] = g.neighbors_a, g.neighbors_b, g.counts
        self.parts[s] = (g.cols, g.rank_a, g.rank_b)
        self.seconds[s] = g.seconds
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
        sketch = (None, None, None) if self.landmarks is None else \
            (self.landmarks, self.out, self.into)
        seconds = np.asarray([self.seconds[s] for s in sorted(self.seconds)])
        return UnionGraph(self.n, self.K, indptr, cols, rank_a, rank_b, self.nb_a,
                          self.nb_b, *sketch, block_seconds=seconds)


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
