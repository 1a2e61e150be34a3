"""Nearest-neighbour search and exact neighbour ranks without an n×n matrix.

Two engines find the ``k`` nearest neighbours of every image:

* ``torch`` — exact blocked search: a row block of squared Euclidean distances (one GEMM,
  on the GPU when the features are there), reduced by ``torch.topk``. Ties are broken by
  image index, the rule of the dense rank matrix (:mod:`rdx.method.ranks`), so the
  neighbour lists are the first ``k`` columns of that matrix's sorted rows.
* ``faiss`` — `faiss <https://github.com/facebookresearch/faiss>`_ (``pip install
  faiss-cpu``): ``flat`` is the same exact search in faiss's kernels; ``ivf`` (inverted
  lists, ``nprobe`` of ``nlist`` cells searched) and ``hnsw`` are approximate indexes for
  very large n on a CPU, whose recall is measured by :func:`knn_recall`.

The large-n RDX graph (:mod:`rdx.method.knn_graph`) needs more than neighbour lists: the
exact rank of given images in another image's sorted list. :class:`DistanceBlock` holds a
row block of squared distances and answers both questions from one GEMM: its top-k
(:meth:`DistanceBlock.topk`) and the rank of any column (:meth:`DistanceBlock.ranks_of`,
by binary search in the row's sorted (value, column) keys — exact, ties by index).

Distances are computed as in :mod:`rdx.method.geometry`: features centred and scaled by a
power of two (:func:`~rdx.method.geometry.to_device_centered`), ``|x|² + |y|² − 2x·y`` in
float32, clamped at +0, exact duplicates at distance 0 from each other and with identical
rows and columns. The image itself gets distance −1, so it is always rank 0.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import torch

from ..backend import n_cpu_threads
from ..errors import RDXInputError
from ..similarity.neighbors import import_faiss
from .geometry import duplicate_representatives
from .ranks import LOW32

FAISS_INDEXES = ("flat", "ivf", "hnsw")
#: Bytes of one float32 row block of distances (the pass holds one per model, each with an
#: int64 block of sorted keys: six such blocks' worth). The GEMM
#: is most of the work: OpenBLAS reaches 125 GFLOP/s per CPU-second with ~670 rows × 768
#: features × 10⁵ columns, 94 with 167 rows (and torch's CPU GEMM 82–107).
BLOCK_BYTES = 256 * 2**20
BLOCK_BYTES_CUDA = 1024 * 2**20
#: Rows per block of the squared norms of :class:`Features`.
_NORM_ROWS = 65536


def block_rows(n: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows of an n-wide float32 block that fit ``block_bytes`` and at most n/8 rows (so the
    blocks and keys of the pass hold at most 3/4 of one dense n×n matrix); at least 16."""
    return int(min(n, max(16, min(n // 8, block_bytes // (4 * max(n, 1))))))


def device_block_rows(n: int, device: torch.device) -> int:
    """:func:`block_rows` with the block size of ``device``."""
    return block_rows(n, BLOCK_BYTES_CUDA if device.type == "cuda" else BLOCK_BYTES)


def row_blocks(n: int, step: int) -> Iterator[tuple[int, int]]:
    for s in range(0, n, step):
        yield s, min(n, s + step)


class Features:
    """One representation prepared for blocked distance computations.

    ``X`` is the centred, power-of-two-scaled float32 copy on the compute device (see
    :func:`~rdx.method.geometry.to_device_centered`), ``sq`` its squared row norms and
    ``rep`` the smallest index of each image's exact duplicate group (None: no duplicates).
    ``torch_sort``: sort rows with torch (the CUDA path) instead of numpy's threaded sort;
    None: on CUDA only (True on the CPU tests the GPU code path).
    """

    def __init__(self, X: torch.Tensor, *, torch_sort: bool | None = None):
        self.X = X
        self.torch_sort = X.is_cuda if torch_sort is None else bool(torch_sort)
        self.n = X.shape[0]
        # squared norms summed in float64, in row blocks (no float64 copy of X: 8·n·d bytes)
        self.sq = torch.cat([(X[s:e].double() ** 2).sum(1).float()
                             for s, e in row_blocks(self.n, _NORM_ROWS)]) if self.n else \
            torch.empty(0, dtype=torch.float32, device=X.device)
        self.rep = duplicate_representatives(X)
        if self.rep is not None:
            self._dup = np.flatnonzero(self.rep != np.arange(self.n))
            self._dup_t = torch.as_tensor(self._dup, device=X.device)
            self._rep_t = torch.as_tensor(self.rep, device=X.device)
        self._buf: torch.Tensor | None = None
        self._keys_buf: torch.Tensor | None = None

    def block(self, start: int, end: int) -> "DistanceBlock":
        """Squared distances of rows ``start:end`` to all images (self = −1).

        The block and its sorted keys live in buffers reused by the next call (allocating
        64 MiB per block costs as much in page faults as the arithmetic), so a block is
        valid until the next call.
        """
        X, dev = self.X, self.X.device
        b = end - start
        if self._buf is None or self._buf.shape[0] < b:
            self._buf = torch.empty((b, self.n), dtype=torch.float32, device=dev)
            self._keys_buf = torch.empty((b, self.n), dtype=torch.int64, device=dev)
        D = self._buf[:b]
        rows = torch.arange(start, end, device=dev)
        src = rows if self.rep is None else self._rep_t[rows]
        if dev.type == "cpu":   # OpenBLAS: ~1.3× torch's CPU GEMM on these shapes
            Xn = X.numpy()
            np.matmul(Xn[start:end] if self.rep is None else Xn[src.numpy()], Xn.T,
                      out=D.numpy())
        else:
            torch.mm(X[src], X.T, out=D)
        D.mul_(-2.0).add_(self.sq[src][:, None]).add_(self.sq[None, :]).clamp_(min=0.0)
        if self.rep is not None:
            # duplicates: copies of their representative's column, 0 within a group
            D[:, self._dup_t] = D[:, self._rep_t[self._dup_t]]
            D.masked_fill_(self._rep_t[src][:, None] == self._rep_t[None, :], 0.0)
        D[torch.arange(b, device=dev), rows] = -1.0
        return DistanceBlock(D, start, self._keys_buf[:b], torch_sort=self.torch_sort)


def sort_keys(values: np.ndarray | torch.Tensor, cols: np.ndarray | torch.Tensor,
              out: np.ndarray | torch.Tensor | None = None) -> np.ndarray | torch.Tensor:
    """int64 keys ``(value bits << 32) | column`` of float32 squared distances: they order
    like (value, column), i.e. the rank rule of the dense matrices with ties by index, so a
    row's rank of any column is a binary search with no tie to resolve. Non-negative float32
    bits order like the values (−0.0 counts as 0); negative values (the image itself, −1)
    get the smallest keys."""
    if isinstance(values, torch.Tensor):
        k = torch.empty(values.shape, dtype=torch.int64, device=values.device) \
            if out is None else out
        k.copy_(values.view(torch.int32))
        k.clamp_(min=0).masked_fill_(values < 0, -1)
        return k.bitwise_left_shift_(32).bitwise_or_(cols)
    k = np.empty(values.shape, dtype=np.int64) if out is None else out
    k[...] = values.view(np.int32)
    np.maximum(k, 0, out=k)
    k[values < 0] = -1
    k <<= 32
    k |= cols
    return k


def _sort_keys_cpu(D: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Row-sorted keys (:func:`sort_keys`) of ``D`` in ``out``, rows split over the CPU
    threads (numpy's SIMD sort and ufuncs release the GIL; the sort is about 8× faster than
    ``torch.sort`` on the CPU)."""
    parts = [p for p in np.array_split(np.arange(D.shape[0]), n_cpu_threads()) if len(p)]
    cols = np.arange(D.shape[1], dtype=np.int64)[None, :]

    def work(p: np.ndarray) -> None:
        a, b = p[0], p[-1] + 1
        sort_keys(D[a:b], cols, out=out[a:b])
        out[a:b].sort(axis=1)

    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        list(pool.map(work, parts))
    return out


class DistanceBlock:
    """A row block ``D`` (b × n, float32, self = −1) of squared distances.

    Rank of column j in row i (0-based, the dense rule): ``#{l : D_il < D_ij} +
    #{l < j : D_il = D_ij}`` — the position of j's key in the row's sorted keys
    (:func:`sort_keys`).
    """

    def __init__(self, D: torch.Tensor, start: int, keys_out: torch.Tensor | None = None,
                 *, torch_sort: bool | None = None):
        self.D = D
        self.torch_sort = D.is_cuda if torch_sort is None else bool(torch_sort)
        self.start = start
        self._out = keys_out
        self._keys: torch.Tensor | None = None

    @property
    def keys(self) -> torch.Tensor:
        """Each row's sort keys (:func:`sort_keys`), ascending (computed once)."""
        if self._keys is None:
            D = self.D
            out = (torch.empty(D.shape, dtype=torch.int64, device=D.device)
                   if self._out is None else self._out)
            if self.torch_sort:
                cols = torch.arange(D.shape[1], device=D.device)[None, :]
                sort_keys(D, cols, out=out)
                self._keys = torch.sort(out, dim=1).values
            else:
                self._keys = torch.from_numpy(_sort_keys_cpu(D.numpy(), out.numpy()))
        return self._keys

    def topk(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Ids (int64) and squared distances of each row's ``k`` nearest other images,
        nearest first, ties by index (self excluded): the columns of the sorted keys 1..k
        (key 0 is the image itself)."""
        ids = self.keys[:, 1:k + 1] & LOW32
        return ids, self.D.gather(1, ids)

    def ranks_of(self, cols: torch.Tensor) -> torch.Tensor:
        """Exact ranks (int64, b × q) of the columns ``cols`` (b × q) in their rows."""
        q = sort_keys(self.D.gather(1, cols).contiguous(), cols)
        return torch.searchsorted(self.keys, q)

    def row_ranks(self, rows: np.ndarray) -> np.ndarray:
        """Ranks (int64, q × n) of every column in the block's rows ``rows`` (local ids):
        the inverse of their sorted keys' column order."""
        order = self.keys[torch.as_tensor(rows, device=self.D.device)] & LOW32
        q, n = order.shape
        out = torch.empty_like(order)
        out.scatter_(1, order, torch.arange(n, device=order.device).expand(q, n))
        return out.cpu().numpy()


def exact_knn(feats: Features, k: int, *, progress: bool = False
              ) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest neighbours of every image (self excluded), blocked (engine ``torch``).

    Returns ids (n × k, int64) and squared distances (n × k, float32), nearest first,
    ties by index.
    """
    from tqdm.auto import tqdm

    n = feats.n
    idx = np.empty((n, k), dtype=np.int64)
    d2 = np.empty((n, k), dtype=np.float32)
    step = device_block_rows(n, feats.X.device)
    for s, e in tqdm(list(row_blocks(n, step)), desc="k-NN", disable=not progress,
                     leave=False):
        ids, vals = feats.block(s, e).topk(k)
        idx[s:e], d2[s:e] = ids.cpu().numpy(), vals.cpu().numpy()
    return idx, d2


def faiss_knn(X: np.ndarray, k: int, *, index: str = "flat", nlist: int | None = None,
              nprobe: int = 32, hnsw_m: int = 32, ef_search: int | None = None,
              seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """k nearest neighbours by squared Euclidean distance with faiss (self excluded).

    ``index``: ``flat`` (exact), ``ivf`` (``IndexIVFFlat`` with ``nlist`` cells, default
    ≈ 4√n, trained on a seeded sample; ``nprobe`` cells searched per query) or ``hnsw``
    (``IndexHNSWFlat`` with ``hnsw_m`` links, ``efSearch`` = ``ef_search`` or 2k).
    Approximate indexes may miss true neighbours (measure with :func:`knn_recall`); the
    lists returned are still sorted by distance, ties by index.
    """
    faiss = import_faiss()
    if index not in FAISS_INDEXES:
        raise RDXInputError(f"unknown faiss index {index!r}; use one of {FAISS_INDEXES}.")
    X = np.ascontiguousarray(X, dtype=np.float32)
    n, d = X.shape
    if index == "flat":
        ix = faiss.IndexFlatL2(d)
    elif index == "ivf":
        nlist = int(nlist or max(1, min(n // 39, round(4 * np.sqrt(n)))))
        quant = faiss.IndexFlatL2(d)
        ix = faiss.IndexIVFFlat(quant, d, nlist)
        train = X[np.random.default_rng(seed).choice(n, size=min(n, 256 * nlist),
                                                      replace=False)]
        ix.cp.seed = seed
        ix.train(train)
        ix.nprobe = min(nprobe, nlist)
    else:
        ix = faiss.IndexHNSWFlat(d, hnsw_m)
        ix.hnsw.efSearch = int(ef_search or max(2 * k, 64))
    ix.add(X)
    D, I = ix.search(X, k + 1)
    return _drop_self(I, D, k)


def _drop_self(I: np.ndarray, D: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Remove each row's own id (or its last entry when the search did not return it) and
    order by (distance, id)."""
    n = I.shape[0]
    own = I == np.arange(n)[:, None]
    missing = ~own.any(axis=1)
    own[missing, -1] = True              # drop the farthest instead
    keep = ~own
    I = I[keep].reshape(n, -1)[:, :k]
    D = D[keep].reshape(n, -1)[:, :k]
    D = np.where(I < 0, np.inf, D)      # faiss pads missing results with −1
    o = np.lexsort((I, D), axis=1)
    return np.take_along_axis(I, o, 1).astype(np.int64), np.take_along_axis(D, o, 1)


def knn_recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of the true k neighbours (rows of ``truth``) present in ``found``."""
    n, k = truth.shape
    hits = 0
    for s in range(0, n, 4096):
        a, b = found[s:s + 4096], truth[s:s + 4096]
        both = np.sort(np.concatenate([a, b], axis=1), axis=1)
        hits += int((both[:, 1:] == both[:, :-1]).sum())
    return hits / (n * k)

