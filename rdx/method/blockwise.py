"""Row-blocked work on dense n×n matrices: block sizes and the thread pool that runs numpy
blocks.

An n×n step is done in row blocks so that its temporaries stay bounded; numpy's loops are
single-threaded but release the GIL on large blocks, so blocks of a numpy array run in a
process-wide thread pool (:func:`in_thread_pool`), blocks of a torch tensor in order (torch
threads each operation itself).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..backend import n_cpu_threads
from . import arrays as A
from .arrays import Array

#: Bytes of int64 sort keys a worker holds at once (bounds the block workspace).
_KEY_BLOCK_BYTES = 32 * 2**20
#: Bytes of a row block for chains of element-wise operations: small enough to stay in the
#: CPU cache between the operations of a chain (1.5–2× faster than 32 MiB blocks).
_MAP_BLOCK_BYTES = 2 * 2**20


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


def rows_per_block(n: int, block_bytes: int = _KEY_BLOCK_BYTES, itemsize: int = 8) -> int:
    """Rows of an n-column block of ``itemsize``-byte entries that fit in ``block_bytes``
    (at least 1, at most n)."""
    return int(max(1, min(n, block_bytes // (itemsize * max(n, 1)))))


def balanced_step(n_rows: int, step: int) -> int:
    """Rows per block: at most ``step``, and at least as many blocks as CPU threads (equal
    sizes), so that a thread pool is not left with one large block and one small one."""
    blocks = max(-(-n_rows // max(step, 1)), min(n_cpu_threads(), n_rows), 1)
    return max(1, -(-n_rows // blocks))


def map_row_blocks_(M: Array, fn: Callable[[Array, int], None]) -> None:
    """Apply an in-place ``fn(block, row_offset)`` to row blocks of ``M`` (bounded
    temporaries). Numpy blocks run in a thread pool (numpy's loops are single-threaded but
    release the GIL); ``fn`` must only touch its own block."""
    n = M.shape[0]
    step = rows_per_block(n, _MAP_BLOCK_BYTES, 4)
    for_blocks(M, lambda s: fn(M[s:s + step], s), range(0, n, step))


def for_blocks(M: Array, fn: Callable[[int], None], starts: range) -> None:
    """``fn(s)`` for every start of blocks of ``M``: in order for tensors (torch threads each
    operation itself), in the thread pool for numpy arrays (:func:`in_thread_pool`)."""
    if A.is_tensor(M):
        for s in starts:
            fn(s)
    else:
        in_thread_pool(fn, starts)
