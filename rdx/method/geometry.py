"""Pairwise geometry of one representation: centring, squared distances, local scales.

All dense n×n work is done in place on one float32 buffer, in row blocks
(:mod:`rdx.method.blockwise`), so that the peak memory of a step is one n×n matrix plus a
bounded block workspace. Exact duplicate images are always tied: they get distance 0 to each
other and bit-identical distances to every other image (a BLAS may otherwise round the same
dot product differently in different matrix blocks). Neighbour ranks are built on these
distances in :mod:`rdx.method.ranks`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..backend import release_mapped_pages
from ..errors import RDXInputError
from . import arrays as A
from .arrays import Array
from .blockwise import for_blocks, in_thread_pool, map_row_blocks_, rows_per_block
from .gram import gram_cpu_

if TYPE_CHECKING:
    import torch


#: Float64 elements of :func:`centered`'s work at once: above it the rows are streamed in
#: blocks of this size instead of one float64 copy of X (8·n·d bytes: 6 GB at 10⁶ × 768).
CENTRE_BLOCK = 1 << 22


def centered(X: np.ndarray) -> np.ndarray:
    """Float32 copy of ``X``, column mean removed and scaled by a power of two.

    Distances do not change, but centring makes the GEMM form ``|x|² + |y|² − 2x·y`` much
    more accurate for data far from the origin (and exactly translation invariant). Every
    measure RDX computes is scale invariant, so the data are also scaled by the power of two
    nearest to 1/max|x| — exact in floating point (ranks are bit-for-bit unchanged) and it
    keeps squared distances far from float32 overflow for any input magnitude.

    A large 2-D ``X`` (more than :data:`CENTRE_BLOCK` elements, e.g. a memory-mapped file)
    is read in row blocks: the only n × d array made is the float32 result, and the values
    are the same to the last bit (:func:`_column_sums` adds the rows in numpy's order). A
    memory-mapped ``X`` then gives its pages back
    (:func:`rdx.backend.release_mapped_pages`).
    """
    return centered_with_span(X)[0]


def centered_with_span(X: np.ndarray) -> tuple[np.ndarray, float]:
    """:func:`centered` and the largest absolute centred value before scaling,
    ``max |X − mean(X)|`` in float64 (0 for constant data): the two together give the factor
    the data were divided by without a second pass over ``X``."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] < 2 or X.size <= CENTRE_BLOCK:
        Xc = np.array(X, dtype=np.float64)  # a private copy, worked on in place
        Xc -= Xc.mean(axis=0, keepdims=True)
        peak = max(float(Xc.max()), -float(Xc.min())) if Xc.size else 0.0
        if peak > 0:
            np.ldexp(Xc, -int(np.round(np.log2(peak))), out=Xc)
        return Xc.astype(np.float32), peak
    n = len(X)
    step = max(1, CENTRE_BLOCK // X.shape[1])
    mean = _column_sums(X, step) / n          # np.mean: the sum, then one division
    # the two passes below are element-wise (and a maximum): their blocks run in the
    # thread pool, in any order, with the same result
    starts = range(0, n, step)

    def block_peak(s: int) -> float:
        Xc = X[s:s + step].astype(np.float64)
        Xc -= mean
        return max(float(Xc.max()), -float(Xc.min()))
    peak = max([0.0, *in_thread_pool(block_peak, starts)])
    shift = -int(np.round(np.log2(peak))) if peak > 0 else 0
    out = np.empty(X.shape, dtype=np.float32)

    def block_out(s: int) -> None:
        Xc = X[s:s + step].astype(np.float64)
        Xc -= mean
        if peak > 0:
            np.ldexp(Xc, shift, out=Xc)
        out[s:s + step] = Xc
    in_thread_pool(block_out, starts)
    # a mapped file's pages (read by the checks and the two passes above) are not kept
    # resident next to their working copy
    release_mapped_pages(X)
    return out, peak


def _column_sums(X: np.ndarray, step: int) -> np.ndarray:
    """``X.astype(float64).sum(axis=0)`` in row blocks of ``step``, bit for bit: numpy adds
    the rows of a C-ordered 2-D array one after the other, so each block continues from the
    running sum (put in front of the block) rather than being summed on its own."""
    d = X.shape[1]
    buf = np.empty((step + 1, d), dtype=np.float64)
    total = np.zeros(d, dtype=np.float64)
    for s in range(0, len(X), step):
        block = X[s:s + step]
        buf[0] = total
        buf[1:len(block) + 1] = block
        total = buf[:len(block) + 1].sum(axis=0)
    return total


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


def euclidean_distances(X: np.ndarray) -> np.ndarray:
    """The n × n Euclidean distances RDX computes from features ``X``, in float64.

    The square roots of the float32 squared distances of the fit (:func:`squared_distances`
    of :func:`centered` ``X``), at the scale of ``X``: ``RDX(metric="precomputed")`` on
    them gives the neighbour ranks of ``RDX()`` on ``X`` bit for bit. Any other exact
    computation of the same distances (``scipy.spatial.distance.cdist``) gives the same
    ranks except between pairs whose distances tie within float32 rounding — exact ties,
    as integer pixel values make many of, are broken by index there and by rounding here.
    """
    Xc, peak = centered_with_span(np.asarray(X))
    D = np.sqrt(squared_distances(Xc).astype(np.float64))
    # centered() divided by 2^round(log2 peak): multiplying back is exact
    return np.ldexp(D, int(np.round(np.log2(peak)))) if peak > 0 else D


class PrecomputedDistances:
    """A checked n × n distance matrix standing in for features (``metric="precomputed"``).

    It gives what the fit and the scores take from features: squared distances of chosen
    rows, and the whole squared-distance matrix, as float32 with an exactly zero diagonal.
    The matrix is scaled by the power of two nearest to ``1 / max D`` first — exact in
    floating point, like :func:`centered`'s scaling of features, so neighbour ranks are
    unchanged and squares stay far from float32 overflow — and squared in float64 before the
    cast: for a matrix holding the square roots of RDX's own squared distances, the cast
    gives those squared distances back.

    Parameters
    ----------
    D : (n, n) array
        Checked by :func:`rdx.validation.check_distance_matrix`; read, never copied whole
        (a memory-mapped file stays mapped).
    device : str, default="cpu"
        Where :meth:`squared` puts the whole matrix (a torch tensor off the CPU).
    """

    def __init__(self, D: np.ndarray, device: str = "cpu"):
        self.D = D
        self.device = str(device)
        self.shape = (int(D.shape[0]), int(D.shape[1]))
        peak = float(max(float(D[s:s + 4096].max()) for s in range(0, len(D), 4096)))
        #: the power of two the distances are multiplied by
        self.shift = -int(np.round(np.log2(peak))) if peak > 0 else 0

    @property
    def n(self) -> int:
        return self.shape[0]

    def _squares(self, block: np.ndarray) -> np.ndarray:
        x = np.ldexp(np.asarray(block, dtype=np.float64), self.shift)
        x *= x
        return x.astype(np.float32)

    def between(self, rows: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
        """Squared distances ``len(rows) × len(cols)`` (all columns if None), float32 numpy,
        exactly 0 from an image to itself."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        block = self.D[rows] if cols is None else \
            self.D[rows][:, np.asarray(cols, dtype=np.int64).reshape(-1)]
        out = self._squares(block)
        c = np.arange(self.n) if cols is None else np.asarray(cols, dtype=np.int64).reshape(-1)
        out[rows[:, None] == c[None, :]] = 0.0
        return out

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        """Squared distances from ``rows`` to all images (as :class:`DistanceRows`)."""
        return self.between(rows)

    def squared(self, out: Array | None = None) -> Array:
        """The whole n × n squared-distance matrix (as :func:`squared_distances`), built in
        row blocks into ``out`` (allocated on :attr:`device` if None)."""
        n = self.n
        if out is None:
            if self.device == "cpu":
                out = np.empty((n, n), dtype=np.float32)
            else:
                import torch

                out = torch.empty((n, n), dtype=torch.float32, device=self.device)
        step = rows_per_block(n)
        for s in range(0, n, step):
            block = self._squares(self.D[s:s + step])
            out[s:s + step] = block if not A.is_tensor(out) else A.like(block, out)
        A.fill_diagonal_(out, 0.0)
        return out


def _gram_to_squared_distances_(G: Array, sq_rows: Array, sq_cols: Array) -> Array:
    """``|x|² + |y|² − 2x·y`` in place, clamped to ``+0.0`` (never ``-0.0``: key bits ≥ 0)."""
    G *= -2.0
    G += sq_rows[:, None]
    G += sq_cols[None, :]
    return A.clamp_nonnegative_(G)


def duplicate_representatives(X: Array) -> np.ndarray | None:
    """For each row, the smallest index of an identical row; None if all rows are distinct.

    Rows are bucketed by a random projection (exact duplicates collide) and candidates are
    confirmed by comparing their bytes, so this costs O(n·d) time; the projection is made in
    row blocks (no float64 copy of X).
    """
    Xn = A.host(X)
    v = np.random.default_rng(12345).standard_normal(Xn.shape[1])
    step = max(1, CENTRE_BLOCK // max(1, Xn.shape[1]))
    proj = np.concatenate([Xn[s:s + step].astype(np.float64) @ v
                           for s in range(0, len(Xn), step)]) if len(Xn) else np.empty(0)
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
    if isinstance(X, PrecomputedDistances):
        return X.squared(out)
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


#: Rows above which :func:`max_squared_distance_bounded` searches the largest distance
#: from the rows farthest from the origin instead of over all pairs (the all-pairs search
#: costs n²·d: ≈ 13 s at 5·10⁴ × 768 on 2 cores, 1.5 h at 10⁶).
EXACT_MAX_DISTANCE_N = 50_000
#: Rows farthest from the origin whose distances to every row are computed above that n.
FAR_CANDIDATES = 2048


def max_squared_distance_bounded(X: Array, *, candidates: int = FAR_CANDIDATES,
                                 distances: "DistanceRows | None" = None,
                                 block_bytes: int = 256 * 2**20) -> tuple[float, float]:
    """Largest squared pairwise distance of ``X`` (n × d), with a certified upper bound, in
    O(candidates·n·d) instead of O(n²·d).

    Every pair with one row among the ``candidates`` rows of largest norm |x| is searched
    exactly (and the rows a farthest-point sweep from the largest one reaches, which are
    usually the diameter's ends). A pair (i, j) of two other rows has
    D(i, j) ≤ |x_i| + |x_j| ≤ 2·r, r the largest norm left out (the triangle inequality
    through the origin, tight for centred data). So ``value ≤ max D² ≤ upper``, and the two
    are equal — the value exact — when ``4r² ≤ value``.

    ``distances``: a :class:`DistanceRows` of ``X`` to reuse (its duplicate groups and
    norms); the candidates' rows are computed in blocks of about ``block_bytes``.

    Returns
    -------
    value, upper : float
        The largest squared distance found, and the bound on the true one.
    """
    n = X.shape[0]
    if n < 2:
        return 0.0, 0.0
    rows_of = DistanceRows(X) if distances is None else distances
    sq = np.asarray(A.host(A.squared_norms(X)), dtype=np.float64)
    c = min(int(candidates), n)
    order = np.argsort(-sq, kind="stable")
    chosen = set(order[:c].tolist())
    # farthest-point sweep: the farthest row from the largest one, then from that one
    p = int(order[0])
    for _ in range(2):
        d2 = np.asarray(rows_of(np.asarray([p])), dtype=np.float64).reshape(-1)
        p = int(np.argmax(d2))
        chosen.add(p)
    rows = np.sort(np.fromiter(chosen, dtype=np.int64))
    best = 0.0
    step = max(1, block_bytes // (4 * n))
    for s in range(0, len(rows), step):
        best = max(best, float(rows_of(rows[s:s + step]).max()))
    left = order[c:]
    left = left[~np.isin(left, rows)]
    upper = 4.0 * float(sq[left].max()) if len(left) else best
    return best, max(best, upper)


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
    if isinstance(X, PrecomputedDistances):
        return X.between(rows, cols)
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


def neighbor_sets(X: np.ndarray, anchors: np.ndarray, k: int, *,
                  rows_of: DistanceRows | None = None) -> np.ndarray:
    """Indices of the ``k`` nearest other images of each anchor (``len(anchors) × k``,
    unordered), on the float32 distances of the centred features (:func:`centered`); ties by
    position in the partition. An exact duplicate of an anchor is at distance 0, so it is
    among the anchor's neighbours. ``rows_of``: a :class:`DistanceRows` of ``centered(X)``
    to reuse."""
    anchors = np.asarray(anchors, dtype=np.int64)
    rows_of = DistanceRows(centered(X)) if rows_of is None else rows_of
    d2 = rows_of(anchors).astype(np.float64)
    d2[np.arange(len(anchors)), anchors] = np.inf
    return np.argpartition(d2, k - 1, axis=1)[:, :k]


def kth_neighbor_distance(D2: Array, position: int) -> Array:
    """Per-row distance to the image at sorted position ``position`` (self = position 0).

    This is σ of Zelnik-Manor & Perona's local scaling (``position=7`` → 7th neighbour).
    """
    n = D2.shape[0]
    if not 0 < position < n:
        raise RDXInputError(
            f"sigma_neighbor={position} must be between 1 and n_images-1={n - 1}.")
    out = A.empty((n,), D2)
    step = rows_per_block(n)
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
    step = rows_per_block(n)

    def one(s: int) -> None:
        out[s:s + step] = A.row_sums64(M[s:s + step])
    for_blocks(M, one, range(0, n, step))     # each row's sum is its own: any order
    return out


def abs_max(M: Array) -> float:
    """``max |M|`` without allocating ``|M|``."""
    return max(float(M.max()), -float(M.min()))
