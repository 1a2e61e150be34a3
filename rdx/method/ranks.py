"""Neighbour ranks of one representation, dense (the n×n rank matrix) or for chosen rows.

``R[i, j]`` is the 0-based position of image ``j`` in image
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

import sys
from typing import TYPE_CHECKING

import numpy as np

from . import arrays as A
from .arrays import Array
from .blockwise import balanced_step, in_thread_pool, rows_per_block
from .geometry import squared_distances, squared_distances_between

if TYPE_CHECKING:
    import torch

LOW32 = 0xFFFFFFFF
#: Nearest other images per image that a dense fit keeps from its rank pass
#: (``RDX.nearest_``; the significance null's local scales use the 10th).
NEAREST_KEPT = 10
#: Slots of the (low, high) int32 halves of an int64 in memory.
_LO, _HI = (0, 1) if sys.byteorder == "little" else (1, 0)


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


def _rank_block_numpy(d2: np.ndarray, offset: int, nearest: np.ndarray | None = None) -> None:
    """Replace the rows of ``d2`` (global rows offset..) by their neighbour ranks, in place;
    ``nearest`` (rows × K), when given, receives each row's K nearest other images."""
    b, n = d2.shape
    keys = neighbor_keys_numpy(d2, np.arange(offset, offset + b, dtype=np.int64))
    keys.sort(axis=1)
    keys &= LOW32
    if nearest is not None:      # position 0 is the image itself
        nearest[:] = keys[:, 1:1 + nearest.shape[1]]
    # row by row: ~1.5× faster than np.put_along_axis, whose general indexing dominates
    positions = np.arange(n, dtype=np.float32)
    for i in range(b):
        d2[i, keys[i]] = positions


def _rank_block_torch(d2: "torch.Tensor", offset: int, nearest: np.ndarray | None = None
                      ) -> None:
    """Torch version of :func:`_rank_block_numpy` (used on CUDA; same keys, same result)."""
    import torch

    b, n = d2.shape
    dev = d2.device
    keys = d2.view(torch.int32).to(torch.int64)
    keys.bitwise_left_shift_(32).bitwise_or_(torch.arange(n, device=dev))
    rows = torch.arange(b, device=dev)
    keys[rows, rows + offset] = rows + offset - (1 << 32)
    keys = torch.sort(keys, dim=1).values.bitwise_and_(LOW32)
    if nearest is not None:
        nearest[:] = keys[:, 1:1 + nearest.shape[1]].cpu().numpy()
    d2.scatter_(1, keys, torch.arange(n, device=dev, dtype=torch.float32).expand(b, n))


def ranks_from_squared_distances_(D2: Array, *, use_torch_kernel: bool | None = None,
                                  nearest: np.ndarray | None = None) -> Array:
    """Turn a squared-distance matrix into the neighbour-rank matrix, in place.

    On the CPU, row blocks are sorted in a thread pool with numpy (which releases the GIL);
    on CUDA the torch kernel is used. ``use_torch_kernel`` forces the choice (for tests; it
    needs a tensor). ``nearest``, an (n, K) integer array, receives every image's K nearest
    other images in rank order (ranks 1..K): a by-product of the sort, which
    :mod:`rdx.evaluation.significance` uses for the local scales instead of a second pass
    over all distances.
    """
    n = D2.shape[0]
    step = balanced_step(n, rows_per_block(n))
    starts = list(range(0, n, step))
    torch_kernel = A.on_gpu(D2) if use_torch_kernel is None else use_torch_kernel
    if torch_kernel:
        for s in starts:
            _rank_block_torch(D2[s:s + step], s, None if nearest is None else nearest[s:s + step])
        return D2
    arr = A.host(D2)
    in_thread_pool(lambda s: _rank_block_numpy(arr[s:s + step], s,
                                               None if nearest is None else nearest[s:s + step]),
                   starts)
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
    ``d2`` (``len(rows) × n``, as :class:`~rdx.method.geometry.DistanceRows` gives them).

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
