"""Keeping freed memory for reuse while the same work is repeated (glibc's malloc).

A significance assessment re-runs the method on several null pairs of the same size, and
every re-run allocates the same arrays again: the n × n matrices, row blocks of sort keys,
float64 copies of features. glibc's malloc maps every chunk above its mmap threshold on its
own and unmaps it when freed, and returns the free top of its heap to the kernel past its
trim threshold; the kernel then zeroes every page it hands out again on first touch. At
n = 10 000 that was most of ``rdx explain --significance``'s system time, up to a fifth of
its CPU time on a loaded machine (``benchmarks/bench_significance.py --cost`` prints it).

Inside :func:`reuse_freed_memory` every chunk comes from malloc's heap (none is mapped on
its own) and the heap is not trimmed, so a re-run finds the pages its predecessor left. On
leaving, mapping is allowed again with the thresholds glibc's dynamic mode reaches after its
first large free (:data:`HEAP_CHUNK_MAX` and twice that), and ``malloc_trim`` gives the free
memory back. Nothing computed depends on where an array lives: the values are the same to
the last bit. Elsewhere than glibc (macOS, musl) this does nothing.
"""
from __future__ import annotations

import contextlib
import ctypes
import platform
import threading
from collections.abc import Iterator

#: glibc's ``mallopt`` parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
#: glibc's default ``M_MMAP_MAX``: how many chunks may be mapped on their own at once.
DEFAULT_MMAP_MAX = 65536
#: mmap threshold set on leaving: glibc's cap on it on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``,
#: 32 MiB), which its dynamic mode reaches after freeing a chunk that large.
HEAP_CHUNK_MAX = 32 * 2**20
#: Free heap memory kept inside :func:`reuse_freed_memory` before malloc trims (the largest
#: ``int`` ``mallopt`` takes is 2 GiB).
KEEP_FREE_MAX = 2**30

_LOCK = threading.Lock()
_DEPTH = 0
_LIBC: ctypes.CDLL | None | bool = False      # False: not looked up yet


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc ≥ 2.33): sizes in bytes."""
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _libc() -> ctypes.CDLL | None:
    """The process's glibc (``mallopt`` and ``malloc_trim``), or None elsewhere."""
    global _LIBC
    if _LIBC is False:
        _LIBC = None
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            try:
                lib = ctypes.CDLL(None)
                lib.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                lib.malloc_trim.argtypes = [ctypes.c_size_t]
                if hasattr(lib, "mallinfo2"):            # glibc ≥ 2.33
                    lib.mallinfo2.restype = _MallInfo2
                _LIBC = lib
            except (OSError, AttributeError):
                _LIBC = None
    return _LIBC


def kept_free_bytes() -> int:
    """Free memory malloc holds for reuse inside :func:`reuse_freed_memory` (0 outside it or
    where it cannot be read): memory this process can use again at once, which the operating
    system no longer counts as available (see :func:`rdx.backend.available_memory_bytes`)."""
    lib = _libc()
    if lib is None or _DEPTH == 0 or not hasattr(lib, "mallinfo2"):
        return 0
    return int(lib.mallinfo2().fordblks)


def supported() -> bool:
    """Whether :func:`reuse_freed_memory` changes anything here (glibc)."""
    return _libc() is not None


@contextlib.contextmanager
def reuse_freed_memory() -> Iterator[None]:
    """Keep freed memory in malloc's heap for the duration (see the module docstring).

    Nested and concurrent uses share one setting, restored when the last one leaves.
    """
    global _DEPTH
    lib = _libc()
    if lib is None:
        yield
        return
    with _LOCK:
        if _DEPTH == 0:
            lib.mallopt(M_TRIM_THRESHOLD, KEEP_FREE_MAX)
            lib.mallopt(M_MMAP_MAX, 0)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                lib.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
                lib.mallopt(M_MMAP_THRESHOLD, HEAP_CHUNK_MAX)
                lib.mallopt(M_TRIM_THRESHOLD, 2 * HEAP_CHUNK_MAX)
                lib.malloc_trim(0)


__all__ = ["HEAP_CHUNK_MAX", "KEEP_FREE_MAX", "kept_free_bytes", "reuse_freed_memory",
           "supported"]
