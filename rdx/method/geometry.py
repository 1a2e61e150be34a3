"""Pairwise geometry of one representation: distances, neighbour ranks, local scales.

All dense n×n work is done in place on one float32 buffer, in row blocks, so that the peak
memory of a step is one n×n matrix plus a bounded block workspace.

Neighbour ranks (spec §1.2): ``R[i, j]`` is the 0-based position of image ``j`` in image
``i``'s list of all images sorted by Euclidean distance from ``i``. The image itself always
has rank 0, even when exact duplicates exist. Ties (equal float32 distances) are broken by
image index, smaller index first, so ranks are deterministic — the original code used an
unstable argsort and produced arbitrary ranks for ties. Exact duplicate images are always
tied: they get distance 0 to each other and bit-identical distances to every other image
(a BLAS may otherwise round the same dot product differently in different matrix blocks).
``R`` is not symmetric.

Implementation: every row is sorted as int64 keys ``(bits(d²) + 1) << 32 | j`` where
``bits`` is the IEEE-754 bit pattern of the non-negative float32 squared distance (which
orders like the value) and the diagonal key is just ``i`` (smaller than every other key).
Sorting unique keys is a plain value sort (fast SIMD sort in numpy, radix sort on CUDA),
gives the (distance, index) order, and the low 32 bits are the column indices.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import torch

from .._backend import n_cpu_threads
from ..errors import RDXInputError

_LOW32 = 0xFFFFFFFF
#: Bytes of int64 sort keys a worker holds at once (bounds the block workspace).
_KEY_BLOCK_BYTES = 32 * 2**20


def to_device_centered(X: np.ndarray, device: torch.device) -> torch.Tensor:
    """Float32 copy of ``X`` on ``device``, column mean removed and scaled by a power of two.

    Distances do not change, but centring makes the GEMM form ``|x|² + |y|² − 2x·y`` much
    more accurate for data far from the origin (and exactly translation invariant). Every
    measure RDX computes is scale invariant, so the data are also scaled by the power of two
    nearest to 1/max|x| — exact in floating point (ranks are bit-for-bit unchanged) and it
    keeps squared distances far from float32 overflow for any input magnitude.
    """
    Xc = np.asarray(X, dtype=np.float64)
    Xc = Xc - Xc.mean(axis=0, keepdims=True)
    peak = float(np.abs(Xc).max()) if Xc.size else 0.0
    if peak > 0:
        Xc = np.ldexp(Xc, -int(np.round(np.log2(peak))))
    return torch.from_numpy(Xc.astype(np.float32)).to(device)


def _squared_norms(X: torch.Tensor) -> torch.Tensor:
    return (X.double() ** 2).sum(1).float()


def _gram_to_squared_distances_(G: torch.Tensor, sq_rows: torch.Tensor,
                                sq_cols: torch.Tensor) -> torch.Tensor:
    """``|x|² + |y|² − 2x·y`` in place, clamped to ``+0.0`` (never ``-0.0``: key bits ≥ 0)."""
    return G.mul_(-2.0).add_(sq_rows[:, None]).add_(sq_cols[None, :]).clamp_(min=0.0).abs_()


def duplicate_representatives(X: torch.Tensor) -> np.ndarray | None:
    """For each row, the smallest index of an identical row; None if all rows are distinct.

    Rows are bucketed by a random projection (exact duplicates collide) and candidates are
    confirmed by comparing their bytes, so this costs O(n·d).
    """
    Xn = X.cpu().numpy()
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


def _equalize_duplicates_(D2: torch.Tensor, rep: np.ndarray) -> None:
    """Make duplicate rows/columns copies of their representative's; zero within groups."""
    dup = np.flatnonzero(rep != np.arange(len(rep)))
    d = torch.as_tensor(dup, device=D2.device)
    r = torch.as_tensor(rep[dup], device=D2.device)
    D2[d] = D2[r]
    D2[:, d] = D2[:, r]
    for g in np.unique(rep[dup]):
        members = torch.as_tensor(np.flatnonzero(rep == g), device=D2.device)
        D2[members[:, None], members[None, :]] = 0.0


def squared_distances(X: torch.Tensor, out: torch.Tensor | None = None,
                      strip: int = 2048) -> torch.Tensor:
    """Dense ``n×n`` float32 squared Euclidean distances with an exactly zero diagonal.

    On the CPU the Gram matrix is built from its upper triangle only — row strips
    ``X[i:i+s] @ X[i:].T`` with numpy/OpenBLAS (faster than torch's CPU GEMM there) — and
    the lower triangle is mirrored in 512-tiles (about 40 % less time than a full GEMM). On
    CUDA one cuBLAS GEMM is fastest. Then an in-place, row-blocked conversion.
    """
    n = X.shape[0]
    if out is None:
        out = torch.empty((n, n), dtype=torch.float32, device=X.device)
    if X.is_cuda:
        torch.mm(X, X.T, out=out)
    else:
        Xn, On = X.numpy(), out.numpy()
        for i0 in range(0, n, strip):
            np.matmul(Xn[i0:i0 + strip], Xn[i0:].T, out=On[i0:i0 + strip, i0:])
        _mirror_upper_to_lower_(out, strip)
    sq = _squared_norms(X)
    map_row_blocks_(out, lambda b, s: _gram_to_squared_distances_(b, sq[s:s + b.shape[0]], sq))
    out.fill_diagonal_(0.0)
    rep = duplicate_representatives(X)
    if rep is not None:
        _equalize_duplicates_(out, rep)
    return out


def _mirror_upper_to_lower_(M: torch.Tensor, strip: int, tile: int = 512) -> None:
    """Fill what the row strips skipped: rows of strip ``i0`` lack columns ``0..i0``, which
    are the transposes of blocks earlier strips computed. 512-tiles keep the transposed
    reads in cache (~0.06 s at n = 10k)."""
    n = M.shape[0]
    for i0 in range(strip, n, strip):
        for r in range(i0, min(n, i0 + strip), tile):
            r1 = min(n, r + tile, i0 + strip)
            for c in range(0, i0, tile):
                c1 = min(c + tile, i0)
                M[r:r1, c:c1] = M[c:c1, r:r1].T


def max_squared_distance(X: torch.Tensor, tile: int = 2048) -> float:
    """Largest squared distance over all pairs, without storing an n×n matrix."""
    n = X.shape[0]
    sq = _squared_norms(X)
    best = 0.0
    for i0 in range(0, n, tile):
        i1 = min(n, i0 + tile)
        for j0 in range(i0, n, tile):
            j1 = min(n, j0 + tile)
            blk = torch.addmm(sq[i0:i1, None] + sq[None, j0:j1], X[i0:i1], X[j0:j1].T,
                              beta=1.0, alpha=-2.0)
            best = max(best, float(blk.max()))
    return best


def _block_rows(n: int) -> int:
    return int(max(1, min(n, _KEY_BLOCK_BYTES // (8 * max(n, 1)))))


def neighbor_keys_numpy(d2: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
    """Sort keys (see module docstring) for rows ``row_ids`` whose distances are ``d2``."""
    n = d2.shape[1]
    keys = d2.view(np.int32).astype(np.int64)
    keys += 1
    keys <<= 32
    keys |= np.arange(n, dtype=np.int64)
    keys[np.arange(len(row_ids)), row_ids] = row_ids
    return keys


def _rank_block_numpy(d2: np.ndarray, offset: int) -> None:
    """Replace the rows of ``d2`` (global rows offset..) by their neighbour ranks, in place."""
    b, n = d2.shape
    keys = neighbor_keys_numpy(d2, np.arange(offset, offset + b, dtype=np.int64))
    keys.sort(axis=1)
    keys &= _LOW32
    # torch's scatter is ~4× faster than np.put_along_axis here (and also releases the GIL)
    torch.from_numpy(d2).scatter_(1, torch.from_numpy(keys),
                                  torch.arange(n, dtype=torch.float32).expand(b, n))


def _rank_block_torch(d2: torch.Tensor, offset: int) -> None:
    """Torch version of :func:`_rank_block_numpy` (used on CUDA; same keys, same result)."""
    b, n = d2.shape
    dev = d2.device
    keys = d2.view(torch.int32).to(torch.int64)
    keys.add_(1).bitwise_left_shift_(32).bitwise_or_(torch.arange(n, device=dev))
    rows = torch.arange(b, device=dev)
    keys[rows, rows + offset] = rows + offset
    keys = torch.sort(keys, dim=1).values.bitwise_and_(_LOW32)
    d2.scatter_(1, keys, torch.arange(n, device=dev, dtype=torch.float32).expand(b, n))


def ranks_from_squared_distances_(D2: torch.Tensor, *, use_torch_kernel: bool | None = None
                                  ) -> torch.Tensor:
    """Turn a squared-distance matrix into the neighbour-rank matrix, in place.

    On the CPU, row blocks are sorted in a thread pool with numpy (which releases the GIL);
    on CUDA the torch kernel is used. ``use_torch_kernel`` forces the choice (for tests).
    """
    n = D2.shape[0]
    step = _block_rows(n)
    starts = list(range(0, n, step))
    torch_kernel = D2.is_cuda if use_torch_kernel is None else use_torch_kernel
    if torch_kernel:
        for s in starts:
            _rank_block_torch(D2[s:s + step], s)
        return D2
    arr = D2.numpy()
    with ThreadPoolExecutor(max_workers=n_cpu_threads()) as pool:
        list(pool.map(lambda s: _rank_block_numpy(arr[s:s + step], s), starts))
    return D2


def rank_matrix(X: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Neighbour-rank matrix (float32, exact for n < 2**24) of representation ``X``."""
    return ranks_from_squared_distances_(squared_distances(X, out=out))


def ranks_of_rows(X: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """Neighbour ranks ``R[rows, :]`` (int64) without forming the n×n matrix.

    Uses the same formula, keys and tie rule as :func:`rank_matrix` (so results agree except
    for pairs whose distances differ by float32 rounding).
    """
    rows = np.asarray(rows, dtype=np.int64)
    d2 = squared_distances_between(X, rows)
    keys = neighbor_keys_numpy(d2, rows)
    order = np.sort(keys, axis=1) & _LOW32
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(X.shape[0], dtype=np.int64)[None, :], axis=1)
    return ranks


def squared_distances_between(X: torch.Tensor, rows: np.ndarray,
                              cols: np.ndarray | None = None) -> np.ndarray:
    """Squared distances (float32 numpy, ≥ +0) from ``X[rows]`` to ``X[cols]`` (all if None).

    Same formula and duplicate handling as :func:`squared_distances`, restricted to the
    images involved: each distinct row is computed once and exact duplicates are gathered
    from it. A BLAS may sum dot products in another order than in the full matrix, so values
    can differ from :func:`squared_distances` in the last float32 bit.
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.arange(X.shape[0]) if cols is None else np.asarray(cols, dtype=np.int64)
    union = np.unique(np.concatenate([rows, cols]))
    Xu = X.index_select(0, torch.as_tensor(union, device=X.device))
    rep = duplicate_representatives(Xu)
    if rep is None:
        rep = np.arange(len(union))
    lr, lc = rep[np.searchsorted(union, rows)], rep[np.searchsorted(union, cols)]
    ur, inv_r = np.unique(lr, return_inverse=True)
    uc, inv_c = np.unique(lc, return_inverse=True)
    Xr = Xu.index_select(0, torch.as_tensor(ur, device=X.device))
    Xc = Xu.index_select(0, torch.as_tensor(uc, device=X.device))
    blk = _gram_to_squared_distances_(Xr @ Xc.T, _squared_norms(Xr), _squared_norms(Xc))
    out = blk.cpu().numpy()[inv_r.reshape(-1)][:, inv_c.reshape(-1)]
    out[lr[:, None] == lc[None, :]] = 0.0
    return out


def kth_neighbor_distance(D2: torch.Tensor, position: int) -> torch.Tensor:
    """Per-row distance to the image at sorted position ``position`` (self = position 0).

    This is σ of Zelnik-Manor & Perona's local scaling (``position=7`` → 7th neighbour).
    """
    n = D2.shape[0]
    if not 0 < position < n:
        raise RDXInputError(
            f"sigma_neighbor={position} must be between 1 and n_images-1={n - 1}.")
    out = torch.empty(n, dtype=torch.float32, device=D2.device)
    step = _block_rows(n)
    for s in range(0, n, step):
        out[s:s + step] = torch.kthvalue(D2[s:s + step], position + 1, dim=1).values
    return out.sqrt_()


def row_sums_float64(M: torch.Tensor) -> torch.Tensor:
    """Row sums accumulated in float64, block by block (``M.sum(dtype=float64)`` would
    first cast the whole n×n matrix, doubling the peak memory)."""
    n = M.shape[0]
    out = torch.empty(n, dtype=torch.float64, device=M.device)
    step = _block_rows(n)
    for s in range(0, n, step):
        out[s:s + step] = M[s:s + step].double().sum(dim=1)
    return out


def abs_max(M: torch.Tensor) -> float:
    """``max |M|`` without allocating ``|M|``."""
    return max(float(M.max()), -float(M.min()))


def map_row_blocks_(M: torch.Tensor, fn: Callable[[torch.Tensor, int], None]) -> None:
    """Apply an in-place ``fn(block, row_offset)`` to row blocks of ``M`` (bounded temporaries)."""
    n = M.shape[0]
    step = _block_rows(n) * 2
    for s in range(0, n, step):
        fn(M[s:s + step], s)
