"""Pairwise geometry of one representation: distances, neighbour ranks, local scales.

All dense n×n work is done in place on one float32 buffer, in row blocks, so that the peak
memory of a step is one n×n matrix plus a bounded block workspace.

Neighbour ranks: ``R[i, j]`` is the 0-based position of image ``j`` in image
``i``'s list of all images sorted by Euclidean distance from ``i``. The image itself always
has rank 0, even when exact duplicates exist. Ties (equal float32 distances) are broken by
image index, smaller index first, so ranks are deterministic — the original code used an
unstable argsort and produced arbitrary ranks for ties. Exact duplicate images are always
tied: they get distance 0 to each other and bit-identical distances to every other image
(a BLAS may otherwise round the same dot product differently in different matrix blocks).
``R`` is not symmetric.

Implementation: every row is sorted as int64 keys ``bits(d²) << 32 | j`` where ``bits`` is
the IEEE-754 bit pattern of the non-negative float32 squared distance (which orders like the
value) and the diagonal key is ``i − 2³²`` (negative, so smaller than every other key, with
``i`` in its low 32 bits). Sorting unique keys is a plain value sort (fast SIMD sort in
numpy, radix sort on CUDA), gives the (distance, index) order, and the low 32 bits are the
column indices.
"""
from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..backend import n_cpu_threads
from ..errors import RDXInputError
from . import arrays as A
from .arrays import Array

if TYPE_CHECKING:
    import torch

LOW32 = 0xFFFFFFFF
#: Bytes of int64 sort keys a worker holds at once (bounds the block workspace).
_KEY_BLOCK_BYTES = 32 * 2**20
#: Bytes of a row block for chains of element-wise operations: small enough to stay in the
#: CPU cache between the operations of a chain (1.5–2× faster than 32 MiB blocks).
_MAP_BLOCK_BYTES = 2 * 2**20
#: Slots of the (low, high) int32 halves of an int64 in memory.
_LO, _HI = (0, 1) if sys.byteorder == "little" else (1, 0)


def centered(X: np.ndarray) -> np.ndarray:
    """Float32 copy of ``X``, column mean removed and scaled by a power of two.

    Distances do not change, but centring makes the GEMM form ``|x|² + |y|² − 2x·y`` much
    more accurate for data far from the origin (and exactly translation invariant). Every
    measure RDX computes is scale invariant, so the data are also scaled by the power of two
    nearest to 1/max|x| — exact in floating point (ranks are bit-for-bit unchanged) and it
    keeps squared distances far from float32 overflow for any input magnitude.
    """
    Xc = np.array(X, dtype=np.float64)  # a private copy, worked on in place
    Xc -= Xc.mean(axis=0, keepdims=True)
    peak = max(float(Xc.max()), -float(Xc.min())) if Xc.size else 0.0
    if peak > 0:
        np.ldexp(Xc, -int(np.round(np.log2(peak))), out=Xc)
    return Xc.astype(np.float32)


def to_device_centered(X: np.ndarray, device: "torch.device | str") -> "torch.Tensor":
    """:func:`centered` as a torch tensor on ``device``."""
    import torch

    return torch.from_numpy(centered(X)).to(device)


def centered_on(X: np.ndarray, device: "torch.device | str") -> Array:
    """:func:`centered` where the dense method computes on ``device``: a numpy array on the
    CPU (torch is not imported), a torch tensor elsewhere."""
    if str(device) == "cpu":
        return centered(X)
    return to_device_centered(X, device)


def _gram_to_squared_distances_(G: Array, sq_rows: Array, sq_cols: Array) -> Array:
    """``|x|² + |y|² − 2x·y`` in place, clamped to ``+0.0`` (never ``-0.0``: key bits ≥ 0)."""
    G *= -2.0
    G += sq_rows[:, None]
    G += sq_cols[None, :]
    return A.clamp_nonnegative_(G)


def duplicate_representatives(X: Array) -> np.ndarray | None:
    """For each row, the smallest index of an identical row; None if all rows are distinct.

    Rows are bucketed by a random projection (exact duplicates collide) and candidates are
    confirmed by comparing their bytes, so this costs O(n·d).
    """
    Xn = A.host(X)
    proj = Xn.astype(np.float64) @ np.random.default_rng(12345).standard_normal(Xn.shape[1])
    _, inverse, counts = np.unique(proj, return_inverse=True, return_counts=True)
    if counts.max() < 2:
        return None
    rep = np.arange(len(Xn))
    found = False
    for bucket in np.flatnonzero(counts > 1):
        first: dict[bytes, int] = {}
        for i in np.flatnonzero(inverse == bucket):
            r = first.setdefault(Xn[i].tobytes(), int(i))
            if r != i:
                rep[i], found = r, True
    return rep if found else None


def _equalize_duplicates_(D2: Array, rep: np.ndarray) -> None:
    """Make duplicate rows/columns copies of their representative's; zero within groups."""
    dup = np.flatnonzero(rep != np.arange(len(rep)))
    d = A.like(dup, D2)
    r = A.like(rep[dup], D2)
    D2[d] = D2[r]
    D2[:, d] = D2[:, r]
    for g in np.unique(rep[dup]):
        members = A.like(np.flatnonzero(rep == g), D2)
        D2[members[:, None], members[None, :]] = 0.0


def squared_distances(X: Array, out: Array | None = None) -> Array:
    """Dense ``n×n`` float32 squared Euclidean distances with an exactly zero diagonal.

    On the CPU the Gram matrix is one triangle from BLAS ``ssyrk`` (half the flops of a
    GEMM, written into ``out``) mirrored in 512-tiles; on CUDA one cuBLAS GEMM is fastest.
    Then an in-place, row-blocked conversion.
    """
    n = X.shape[0]
    if out is None:
        out = A.empty((n, n), X)
    if A.on_gpu(X):
        import torch

        torch.mm(X, X.T, out=out)
    else:
        gram_cpu_(A.host(X), A.host(out))
    sq = A.squared_norms(X)
    map_row_blocks_(out, lambda b, s: _gram_to_squared_distances_(b, sq[s:s + b.shape[0]], sq))
    A.fill_diagonal_(out, 0.0)
    rep = duplicate_representatives(X)
    if rep is not None:
        _equalize_duplicates_(out, rep)
    return out


#: Most rows of one BLAS ``ssyrk`` call. OpenBLAS's threaded SYRK (``ssyrk_thread_*``,
#: ``driver/level3/level3_syrk_threaded.c``; seen in 0.3.30 bundled with SciPy 1.17 and in
#: 0.3.31 bundled with NumPy 2.4) packs a thread's whole share of the columns — about
#: n/√2 of them with two threads — into its fixed 32 MiB work buffer, as two halves of
#: ``(GEMM_Q + min(d, GEMM_Q)) × n/(2√2)`` floats, and writes past the buffer when that does
#: not fit: SIGSEGV. The fault depends on n, on d through the depth block
#: (``min(d, GEMM_Q)``, halved for ``GEMM_Q < d < 2·GEMM_Q``) and on the CPU kernels: measured
#: with 2 threads, Haswell kernels (GEMM_Q ≈ 320) fail from n ≈ 35k–37k at d = 768 (34k
#: passes), SkylakeX ones (GEMM_Q ≈ 448) from n ≈ 28k at d = 768, 27k at d = 1536 and 28k at
#: d = 384. One thread (unthreaded driver) and more threads (smaller shares) are safer.
#: 16384 rows keep the packed panel at ≤ 2/3 of the buffer for GEMM_Q ≤ 640; larger n is
#: computed in row blocks (see :func:`gram_cpu_`).
SYRK_MAX_ROWS = 16384
#: Rows of a diagonal block in the blocked Gram path (its ssyrk result goes through a
#: 64 MiB Fortran-ordered temporary).
SYRK_BLOCK_ROWS = 4096


def gram_cpu_(X: np.ndarray, out: np.ndarray, *, strip: int = 1024, tile: int = 512,
               use_syrk: bool = True, syrk_max_rows: int | None = None,
               syrk_block_rows: int | None = None) -> None:
    """``X Xᵀ`` into the C-ordered float32 ``out``: the lower triangle from BLAS, the upper
    one mirrored.

    Up to ``syrk_max_rows`` rows, one ``ssyrk`` writes the whole triangle: ``out.T`` is
    Fortran-ordered, so BLAS writes its "upper" triangle — our lower one — in place (about
    10 % faster than GEMMs on row strips and 40 % faster than a full GEMM at n = 10k).
    Larger ``n`` would crash OpenBLAS's threaded SYRK (see :data:`SYRK_MAX_ROWS`), so the
    triangle is computed in row blocks of ``syrk_block_rows``: the part left of each diagonal
    block by one GEMM ``X[i:j] @ X[:i].T`` written in place, the diagonal block by ``ssyrk``
    into a small temporary (the same flops as one SYRK, in calls that stay inside the safe
    envelope). Should a SciPy build return a copy instead of writing ``out``, the row strips
    ``X[i:i+s] @ X[i:].T`` are used (also with ``use_syrk=False``, for tests). The two
    thresholds default to :data:`SYRK_MAX_ROWS` and :data:`SYRK_BLOCK_ROWS` (lowered in tests
    to run the blocked path on small data).
    """
    n = X.shape[0]
    syrk_max_rows = SYRK_MAX_ROWS if syrk_max_rows is None else int(syrk_max_rows)
    syrk_block_rows = SYRK_BLOCK_ROWS if syrk_block_rows is None else int(syrk_block_rows)
    syrk_ok = (use_syrk and X.dtype == np.float32 and out.dtype == np.float32
               and out.flags.c_contiguous)
    if syrk_ok:
        import scipy.linalg.blas  # when used: scipy.linalg takes ~0.1 s to import
    if syrk_ok and n <= syrk_max_rows:
        res = scipy.linalg.blas.ssyrk(1.0, X.T, beta=0.0, c=out.T, trans=1, lower=0,
                                      overwrite_c=1)
        if np.may_share_memory(res, out):
            _mirror_(out, lower_to_upper=True, tile=tile)
            return
    elif syrk_ok:
        b = max(1, min(syrk_block_rows, syrk_max_rows))
        tmp = np.empty((b, b), dtype=np.float32, order="F")
        for i0 in range(0, n, b):
            i1 = min(n, i0 + b)
            if i0:
                np.matmul(X[i0:i1], X[:i0].T, out=out[i0:i1, :i0])
            c = tmp[:i1 - i0, :i1 - i0]
            if not c.flags.f_contiguous:  # the last, smaller block
                c = np.empty((i1 - i0, i1 - i0), dtype=np.float32, order="F")
            res = scipy.linalg.blas.ssyrk(1.0, X[i0:i1].T, beta=0.0, c=c, trans=1, lower=0,
                                          overwrite_c=1)
            out[i0:i1, i0:i1] = res.T  # its lower triangle is the block's (upper: mirrored)
        _mirror_(out, lower_to_upper=True, tile=tile)
        return
    for i0 in range(0, n, strip):
        np.matmul(X[i0:i0 + strip], X[i0:].T, out=out[i0:i0 + strip, i0:])
    _mirror_(out, lower_to_upper=False, tile=tile)


def _mirror_(M: np.ndarray, *, lower_to_upper: bool, tile: int = 512) -> None:
    """Copy one triangle of a square matrix onto the other, a row of 512-tiles per task in
    a thread pool (the copies release the GIL; 512-tiles keep the transposed reads in
    cache); diagonal tiles mirror their own triangle."""
    n = M.shape[0]

    def tile_row(r: int) -> None:
        r1 = min(n, r + tile)
        t = M[r:r1, r:r1]
        if lower_to_upper:
            t[...] = np.tril(t) + np.tril(t, -1).T
        else:
            t[...] = np.triu(t) + np.triu(t, 1).T
        for c in range(0, r, tile):
            c1 = c + tile  # ≤ r
            if lower_to_upper:
                M[c:c1, r:r1] = M[r:r1, c:c1].T
            else:
                M[r:r1, c:c1] = M[c:c1, r:r1].T

    in_thread_pool(tile_row, range(0, n, tile))


_POOLS: dict[int, ThreadPoolExecutor] = {}
_IN_POOL = threading.local()
if hasattr(os, "register_at_fork"):  # a forked child has none of the pools' threads
    os.register_at_fork(after_in_child=_POOLS.clear)


def in_thread_pool(fn: Callable[[int], Any], starts: range | list[int]) -> list[Any]:
    """``[fn(s) for s in starts]``, in a thread pool when there is more than one start
    (numpy releases the GIL in its loops over large blocks).

    One pool per thread count lives for the process (starting threads for every call cost
    ~20 ms of a small fit); a call from inside a pool task runs in order (no deadlock).
    """
    starts = list(starts)
    workers = n_cpu_threads()
    if len(starts) <= 1 or workers == 1 or getattr(_IN_POOL, "active", False):
        return [fn(s) for s in starts]
    pool = _POOLS.get(workers)
    if pool is None:
        pool = _POOLS[workers] = ThreadPoolExecutor(max_workers=workers,
                                                    thread_name_prefix="rdx")

    def task(s: int) -> Any:
        _IN_POOL.active = True
        try:
            return fn(s)
        finally:
            _IN_POOL.active = False
    return list(pool.map(task, starts))


def max_squared_distance(X: Array, tile: int = 2048) -> float:
    """Largest squared distance over all pairs, without storing an n×n matrix."""
    n = X.shape[0]
    sq = A.squared_norms(X)
    best = 0.0
    for i0 in range(0, n, tile):
        i1 = min(n, i0 + tile)
        for j0 in range(i0, n, tile):
            j1 = min(n, j0 + tile)
            blk = X[i0:i1] @ X[j0:j1].T
            blk *= -2.0
            blk += sq[i0:i1, None]
            blk += sq[None, j0:j1]
            best = max(best, float(blk.max()))
    return best


def _block_rows(n: int, block_bytes: int = _KEY_BLOCK_BYTES, itemsize: int = 8) -> int:
    return int(max(1, min(n, block_bytes // (itemsize * max(n, 1)))))


def balanced_step(n_rows: int, step: int) -> int:
    """Rows per block: at most ``step``, and at least as many blocks as CPU threads (equal
    sizes), so that a thread pool is not left with one large block and one small one."""
    blocks = max(-(-n_rows // max(step, 1)), min(n_cpu_threads(), n_rows), 1)
    return max(1, -(-n_rows // blocks))


def pair_keys(d2: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Sort keys ``bits(d²) << 32 | j`` of off-diagonal entries (see module docstring)."""
    return (np.asarray(d2, dtype=np.float32).view(np.int32).astype(np.int64) << 32) | cols


def neighbor_keys_numpy(d2: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
    """Sort keys (see module docstring) for rows ``row_ids`` whose distances are ``d2``.

    Built by writing the two int32 halves of each key directly (one pass each) rather than
    by int64 shifts and ors (four passes).
    """
    b, n = d2.shape
    halves = np.empty((b, n, 2), dtype=np.int32)
    halves[:, :, _HI] = np.ascontiguousarray(d2, dtype=np.float32).view(np.int32)
    halves[:, :, _LO] = np.arange(n, dtype=np.int32)
    keys = halves.view(np.int64).reshape(b, n)
    row_ids = np.asarray(row_ids, dtype=np.int64)
    keys[np.arange(b), row_ids] = row_ids - (1 << 32)
    return keys


def _rank_block_numpy(d2: np.ndarray, offset: int) -> None:
    """Replace the rows of ``d2`` (global rows offset..) by their neighbour ranks, in place."""
    b, n = d2.shape
    keys = neighbor_keys_numpy(d2, np.arange(offset, offset + b, dtype=np.int64))
    keys.sort(axis=1)
    keys &= LOW32
    # row by row: ~1.5× faster than np.put_along_axis, whose general indexing dominates
    positions = np.arange(n, dtype=np.float32)
    for i in range(b):
        d2[i, keys[i]] = positions


def _rank_block_torch(d2: "torch.Tensor", offset: int) -> None:
    """Torch version of :func:`_rank_block_numpy` (used on CUDA; same keys, same result)."""
    import torch

    b, n = d2.shape
    dev = d2.device
    keys = d2.view(torch.int32).to(torch.int64)
    keys.bitwise_left_shift_(32).bitwise_or_(torch.arange(n, device=dev))
    rows = torch.arange(b, device=dev)
    keys[rows, rows + offset] = rows + offset - (1 << 32)
    keys = torch.sort(keys, dim=1).values.bitwise_and_(LOW32)
    d2.scatter_(1, keys, torch.arange(n, device=dev, dtype=torch.float32).expand(b, n))


def ranks_from_squared_distances_(D2: Array, *, use_torch_kernel: bool | None = None
                                  ) -> Array:
    """Turn a squared-distance matrix into the neighbour-rank matrix, in place.

    On the CPU, row blocks are sorted in a thread pool with numpy (which releases the GIL);
    on CUDA the torch kernel is used. ``use_torch_kernel`` forces the choice (for tests; it
    needs a tensor).
    """
    n = D2.shape[0]
    step = balanced_step(n, _block_rows(n))
    starts = list(range(0, n, step))
    torch_kernel = A.on_gpu(D2) if use_torch_kernel is None else use_torch_kernel
    if torch_kernel:
        for s in starts:
            _rank_block_torch(D2[s:s + step], s)
        return D2
    arr = A.host(D2)
    in_thread_pool(lambda s: _rank_block_numpy(arr[s:s + step], s), starts)
    return D2


def rank_matrix(X: Array, out: Array | None = None) -> Array:
    """Neighbour-rank matrix (float32, exact for n < 2**24) of representation ``X``."""
    return ranks_from_squared_distances_(squared_distances(X, out=out))


def ranks_of_rows(X: Array, rows: np.ndarray) -> np.ndarray:
    """Neighbour ranks ``R[rows, :]`` (int64) without forming the n×n matrix.

    Uses the same formula, keys and tie rule as :func:`rank_matrix` (so results agree except
    for pairs whose distances differ by float32 rounding).
    """
    rows = np.asarray(rows, dtype=np.int64)
    d2 = squared_distances_between(X, rows)
    keys = neighbor_keys_numpy(d2, rows)
    order = np.sort(keys, axis=1) & LOW32
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(X.shape[0], dtype=np.int64)[None, :], axis=1)
    return ranks


def ranks_in_rows(d2: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Neighbour ranks ``R[rows[i], cols[j]]`` (int64) from the rows' squared distances
    ``d2`` (``len(rows) × n``, as :class:`DistanceRows` gives them).

    Same keys and tie rule as :func:`ranks_of_rows` (equal to its ``[:, cols]``): each row's
    keys are sorted once and the columns' keys looked up in them.
    """
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    cols = np.asarray(cols, dtype=np.int64).reshape(-1)
    keys = neighbor_keys_numpy(d2, rows)
    query = keys[:, cols]
    keys.sort(axis=1)
    return np.stack([np.searchsorted(k, q) for k, q in zip(keys, query)]).astype(np.int64) \
        if len(rows) else np.zeros((0, len(cols)), dtype=np.int64)


class DistanceRows:
    """Squared distances from chosen rows of ``X`` to all its rows, with the work that does
    not depend on the chosen rows done once: duplicate groups, the distinct rows and their
    squared norms.

    ``DistanceRows(X)(rows)`` equals ``squared_distances_between(X, rows)`` bit for bit (it
    is that function's implementation); keep one when asking for rows of the same ``X`` many
    times (scoring many grids, chance levels, neighbour lists), which otherwise costs
    O(n·d) each time before the O(|rows|·n·d) product.
    """

    def __init__(self, X: Array):
        self.X = X
        n = X.shape[0]
        rep = duplicate_representatives(X)
        #: for each row, the smallest index of an identical row (itself if none)
        self.representatives = np.arange(n) if rep is None else rep
        self.has_duplicates = rep is not None
        if self.has_duplicates:
            uc, inv_c = np.unique(self.representatives, return_inverse=True)
            self._Xc = A.take(X, uc)
            self._inv_c = inv_c.reshape(-1)
        else:
            self._Xc, self._inv_c = X, None
        self._sq_c = A.squared_norms(self._Xc)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """``(len(rows), n)`` float32 numpy squared distances (≥ +0, exactly 0 between exact
        duplicates and on the image itself)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        lr = self.representatives[rows]
        ur, inv_r = np.unique(lr, return_inverse=True)
        Xr = A.take(self.X, ur)
        blk = _gram_to_squared_distances_(Xr @ self._Xc.T, A.squared_norms(Xr), self._sq_c)
        out = A.host(blk)[inv_r.reshape(-1)]
        if self._inv_c is not None:
            out = out[:, self._inv_c]
            out[lr[:, None] == self.representatives[None, :]] = 0.0
        else:
            out[np.arange(len(rows)), rows] = 0.0
        return out


def squared_distances_between(X: Array, rows: np.ndarray,
                              cols: np.ndarray | None = None) -> np.ndarray:
    """Squared distances (float32 numpy, ≥ +0) from ``X[rows]`` to ``X[cols]`` (all if None).

    Same formula and duplicate handling as :func:`squared_distances`, restricted to the
    images involved: each distinct row is computed once and exact duplicates are gathered
    from it. A BLAS may sum dot products in another order than in the full matrix, so values
    can differ from :func:`squared_distances` in the last float32 bit. For many calls on the
    same ``X`` with all columns, use :class:`DistanceRows`.
    """
    if cols is None:
        return DistanceRows(X)(rows)
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    union = np.unique(np.concatenate([rows, cols]))
    Xu = A.take(X, union)
    rep = duplicate_representatives(Xu)
    if rep is None:
        rep = np.arange(len(union))
    lr, lc = rep[np.searchsorted(union, rows)], rep[np.searchsorted(union, cols)]
    ur, inv_r = np.unique(lr, return_inverse=True)
    uc, inv_c = np.unique(lc, return_inverse=True)
    # distinct rows (columns) are computed in the given order, repeated ones once and
    # gathered (the common case — a cluster's members — needs no gather)
    r_once, c_once = len(ur) == len(lr), len(uc) == len(lc)
    Xr = A.take(Xu, lr if r_once else ur)
    Xc = A.take(Xu, lc if c_once else uc)
    blk = _gram_to_squared_distances_(Xr @ Xc.T, A.squared_norms(Xr), A.squared_norms(Xc))
    out = A.host(blk)
    if not r_once:
        out = out[inv_r.reshape(-1)]
    if not c_once:
        out = out[:, inv_c.reshape(-1)]
    if c_once:   # each representative is one column: zero it in the rows that hold it
        j = np.argsort(lc)[np.minimum(np.searchsorted(uc, lr), len(uc) - 1)]
        hit = lc[j] == lr
        out[np.flatnonzero(hit), j[hit]] = 0.0
    else:
        out[lr[:, None] == lc[None, :]] = 0.0
    return out


def kth_neighbor_distance(D2: Array, position: int) -> Array:
    """Per-row distance to the image at sorted position ``position`` (self = position 0).

    This is σ of Zelnik-Manor & Perona's local scaling (``position=7`` → 7th neighbour).
    """
    n = D2.shape[0]
    if not 0 < position < n:
        raise RDXInputError(
            f"sigma_neighbor={position} must be between 1 and n_images-1={n - 1}.")
    out = A.empty((n,), D2)
    step = _block_rows(n)
    for s in range(0, n, step):
        if A.is_tensor(D2):
            out[s:s + step] = D2[s:s + step].kthvalue(position + 1, dim=1).values
        else:
            out[s:s + step] = np.partition(D2[s:s + step], position, axis=1)[:, position]
    return A.sqrt_(out)


def row_sums_float64(M: Array) -> Array:
    """Row sums accumulated in float64, block by block (``M.sum(dtype=float64)`` would
    first cast the whole n×n matrix, doubling the peak memory)."""
    n = M.shape[0]
    out = A.empty((n,), M, "float64")
    step = _block_rows(n)
    for s in range(0, n, step):
        out[s:s + step] = A.row_sums64(M[s:s + step])
    return out


def abs_max(M: Array) -> float:
    """``max |M|`` without allocating ``|M|``."""
    return max(float(M.max()), -float(M.min()))


def map_row_blocks_(M: Array, fn: Callable[[Array, int], None]) -> None:
    """Apply an in-place ``fn(block, row_offset)`` to row blocks of ``M`` (bounded
    temporaries). Numpy blocks run in a thread pool (numpy's loops are single-threaded but
    release the GIL); ``fn`` must only touch its own block."""
    n = M.shape[0]
    step = _block_rows(n, _MAP_BLOCK_BYTES, 4)
    for_blocks(M, lambda s: fn(M[s:s + step], s), range(0, n, step))


def for_blocks(M: Array, fn: Callable[[int], None], starts: range) -> None:
    """``fn(s)`` for every start of blocks of ``M``: in order for tensors (torch threads each
    operation itself), in the thread pool for numpy arrays (:func:`in_thread_pool`)."""
    if A.is_tensor(M):
        for s in starts:
            fn(s)
    else:
        in_thread_pool(fn, starts)
