"""The Gram matrix ``X Xᵀ`` of one representation on the CPU: one triangle from BLAS
``ssyrk`` (half the flops of a GEMM), mirrored onto the other, in blocks that stay inside
the envelope where OpenBLAS's threaded SYRK is safe."""
from __future__ import annotations

import numpy as np

from .blockwise import in_thread_pool

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
