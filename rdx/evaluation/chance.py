"""Chance levels of BSR / TSD / EQ: the same statistics for random grids.

A method's BSR says how often its grid pairs are closer in one model than in the other;
what that number is worth depends on the data (e.g. two models with different
neighbourhood sizes give random pairs a BSR far from 0.5). The chance level answers "what
would grids of the same sizes, drawn at random from the same images, score?".

One *draw* is a set of random grids with the sizes of the method's grids (each grid drawn
without replacement from all ``n`` images; different grids of a draw may share images, as
a method's grids may). Its BSR/TSD/EQ are pooled over all ordered pairs of all its grids,
exactly as :func:`rdx.evaluation.bsr.bsr_scores` pools a direction. Over ``n_draws`` draws
we report the mean and the 2.5/97.5 percentiles (a 95 % interval).

Speed: scoring draw after draw with ``bsr_scores`` would recompute each sampled image's
full neighbour list once per grid it appears in. Instead every sampled image's row of
squared distances is computed once (in blocks of rows, never an n×n matrix at a time, in
a thread pool), and every dissimilarity is read off it with the same formulas, centring,
keys and tie rules as :class:`rdx.evaluation.bsr.PreparedRepresentation` (which supplies
the centred data, duplicate groups, norms and largest distance — pass prepared
representations to share that work with :func:`~rdx.evaluation.bsr.bsr_scores`): one
float32 sort of the row gives the neighbour ranks of
all its pair partners (binary search; a pair with exactly tied distances is ordered among
its ties by index, as the (distance, index) keys of :func:`rdx.method.ranks.ranks_of_rows`
order it) and the local scale σ
(its k-th smallest entry). Rank and local scaling need full rows (they depend on every
image), so their cost grows as (#sampled images) × n log n: about a second for 1000 draws
of three 9-image grids from n = 5000 images on two cores. Values equal those of
``bsr_scores`` on the same grids up to float32 rounding of distances (exactly, for ranks
of untied data). Where a row has only a few pairs (large ``n``: every sampled image anchors
one grid, 8 pairs for a 9-image grid) the row is not sorted at all: each pair's rank is a
count of the row's entries below its distance (a few linear passes instead of an
``n log n`` sort — at 10⁶ images the sorts were most of the chance levels' time), and σ is
a selection (``np.partition``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import RDXInputError
from ..method.blockwise import in_thread_pool
from .bsr import (DIRECTION_SIGN, DISSIMILARITIES, PreparedRepresentation, check_dissimilarity,
                  prepared_pair)

DIRECTIONS = ("a_over_b", "b_over_a")
#: float32 entries of one block of distance rows (the workspace: the block and its sorted
#: copy per worker, ~256 MiB). Rows per block = this / n: at 10⁶ images 33 rows, where 2
#: rows (a block of 2²¹ entries) made each block a matrix-vector product reading all the
#: features (3 GB at d = 768) for two rows.
_BLOCK_ENTRIES = 2**25
#: Most rows of one block. The blocks are the same whatever the thread count: a BLAS sums a
#: row's dot products in an order that depends on how many rows the product has (one row
#: is a matrix-vector product), so blocks sized by the threads gave another machine other
#: distances in the last bits, and where two models' dissimilarities of a pair are equal
#: up to rounding, another sign. 512 rows cost what the thread-sized blocks cost on two
#: cores (64 rows cost 45 % more at 5000 images: each product packs all n rows again); 1000
#: draws of three 9-image grids sample about 4200 of 5000 images, 9 blocks.
_BLOCK_ROWS = 512
#: Pairs per row up to which a row's ranks are counted rather than read off its sorted
#: copy: a count is one pass over the row per pair, a sort about log₂ n passes' worth.
_COUNT_PAIRS_PER_ROW = 16
#: Above this many images the random grids are drawn from a seeded random pool of
#: :data:`CHANCE_POOL` images instead of all n (see :func:`chance_levels`).
CHANCE_POOL_ABOVE = 50_000
CHANCE_POOL = 5_000


def _check_sizes(grid_sizes: Iterable[int], n: int) -> list[int]:
    sizes = []
    for s in grid_sizes:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise RDXInputError(f"grid_sizes must be non-negative integers, got {s!r}")
        if s > n:
            raise RDXInputError(f"a grid of {int(s)} images cannot be drawn from {n} images "
                                "(grid_sizes must be at most n_images)")
        sizes.append(int(s))
    # the statistic is a function of the multiset of sizes; sorting makes the draws too
    return sorted(sizes, reverse=True)


def draw_grids(n: int, grid_sizes: Sequence[int], n_draws: int,
               rng: np.random.Generator) -> np.ndarray:
    """``n_draws`` random grid sets: an ``(n_draws, sum(grid_sizes))`` index array whose
    consecutive blocks of ``grid_sizes[i]`` columns are the grids (distinct within a grid).

    Large ``n``: integers drawn with replacement and rows with a repeat redrawn (a repeat
    is rare when ``size² ≤ n``); small ``n``: the first ``size`` of a random permutation.
    """
    blocks = []
    for s in grid_sizes:
        if s * s <= n:
            g = rng.integers(0, n, size=(n_draws, s))
            while s > 1:
                srt = np.sort(g, axis=1)
                bad = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
                if not len(bad):
                    break
                g[bad] = rng.integers(0, n, size=(len(bad), s))
        else:
            g = np.argsort(rng.random((n_draws, n)), axis=1)[:, :s]
        blocks.append(g.astype(np.int64))
    if not blocks:
        return np.zeros((n_draws, 0), dtype=np.int64)
    return np.concatenate(blocks, axis=1)


def pair_template(grid_sizes: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Column positions ``(I, J)`` of every ordered pair ``(a, b)``, ``a ≠ b``, of the same
    grid in a row of :func:`draw_grids` (the pairs ``bsr_scores`` counts)."""
    I, J, off = [], [], 0
    for s in grid_sizes:
        i, j = np.nonzero(~np.eye(s, dtype=bool))
        I.append(i + off)
        J.append(j + off)
        off += s
    if not I:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(I).astype(np.int64), np.concatenate(J).astype(np.int64)


def _pair_dissimilarities(prep: PreparedRepresentation, anchors: np.ndarray,
                          partners: np.ndarray, kinds: Sequence[str],
                          sigma_neighbor: int | None = None
                          ) -> dict[str, np.ndarray | RDXInputError]:
    """δ(anchor, partner) for flat pair arrays, under each dissimilarity in ``kinds``.

    Same values as ``prep.dissimilarity(kind, grid)`` gives for those pairs (see the module
    docstring); a dissimilarity undefined for the data maps to the :class:`RDXInputError`
    saying why.
    """
    n = prep.n
    k = prep.sigma_neighbor if sigma_neighbor is None else int(sigma_neighbor)
    need_sort = "rank" in kinds or "local_scaling" in kinds
    need_d2 = "max_normalized_euclidean" in kinds or "local_scaling" in kinds
    out: dict[str, np.ndarray | RDXInputError] = {}
    if "local_scaling" in kinds and not 0 < k < n:
        out["local_scaling"] = RDXInputError(f"sigma_neighbor={k} must be in 1..{n - 1}")
        kinds = [x for x in kinds if x != "local_scaling"]
        need_sort = "rank" in kinds
        need_d2 = "max_normalized_euclidean" in kinds
    m = len(anchors)
    uniq, inv = np.unique(anchors, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")          # pairs grouped by anchor row
    inv_sorted = inv[order]
    rank = np.empty(m, dtype=np.int64) if "rank" in kinds else None
    d2_pairs = np.empty(m, dtype=np.float32) if need_d2 else None
    sigma2 = np.empty(len(uniq), dtype=np.float32) if "local_scaling" in kinds else None
    step = max(1, min(_BLOCK_ROWS, _BLOCK_ENTRIES // max(n, 1)))   # not by threads: above

    def block(u0: int) -> None:
        u1 = min(len(uniq), u0 + step)
        rows = uniq[u0:u1]
        p0, p1 = np.searchsorted(inv_sorted, [u0, u1])
        sel = order[p0:p1]
        local = inv_sorted[p0:p1] - u0
        part = partners[sel]
        d2 = prep.distances(rows)        # (u1-u0) × n, as PreparedRepresentation
        t = d2[local, part]
        if d2_pairs is not None:
            d2_pairs[sel] = t
        if not need_sort:
            return
        if p1 - p0 <= _COUNT_PAIRS_PER_ROW * (u1 - u0):
            # few pairs per row: counts and a top-k selection, no sort (module docstring)
            if sigma2 is not None:
                # = np.partition(d2_row, k)[k], the σ² of PreparedRepresentation
                sigma2[u0:u1] = np.partition(d2, k, axis=1)[:, k]
            if rank is not None:
                below, equal = _counts_in_rows(d2, local, t)
                rank[sel] = _ranks_of_pairs(below, equal, d2, rows, local, part, t)
            return
        S = np.sort(d2, axis=1)
        if sigma2 is not None:
            # = np.partition(d2_row, k)[k], the σ² of PreparedRepresentation
            sigma2[u0:u1] = S[:, k]
        if rank is not None:
            rank[sel] = _ranks_from_sorted(S, d2, rows, local, part, t)

    # numpy's sort and BLAS release the GIL: blocks run in parallel
    in_thread_pool(block, range(0, len(uniq), step))

    if rank is not None:
        out["rank"] = rank.astype(np.float64) + 1.0
    if "max_normalized_euclidean" in kinds:
        out["max_normalized_euclidean"] = (np.sqrt(d2_pairs.astype(np.float64))
                                           / prep.max_distance())
    if sigma2 is not None:
        sigma = np.sqrt(sigma2.astype(np.float64))
        if (sigma == 0).any():
            out["local_scaling"] = RDXInputError(
                "local_scaling dissimilarity undefined: an image has at least "
                f"{k} exact duplicates (zero local scale).")
        else:
            # every partner is also an anchor (pairs are ordered both ways)
            sp = sigma[np.searchsorted(uniq, partners)]
            out["local_scaling"] = d2_pairs.astype(np.float64) / sigma[inv] / sp
    return out


def _counts_in_rows(d2: np.ndarray, local: np.ndarray, t: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """For pairs grouped by row ``local`` of ``d2`` with squared distances ``t``: how many
    of the row's entries are below ``t`` and how many equal it (one pass each)."""
    below = np.empty(len(local), dtype=np.int64)
    equal = np.empty(len(local), dtype=np.int64)
    for i in range(len(local)):
        row, x = d2[local[i]], t[i]
        below[i] = np.count_nonzero(row < x)
        equal[i] = np.count_nonzero(row == x)
    return below, equal


def _ranks_from_sorted(S: np.ndarray, d2: np.ndarray, rows: np.ndarray, local: np.ndarray,
                       part: np.ndarray, t: np.ndarray) -> np.ndarray:
    """0-based neighbour rank of ``part`` in the list of ``rows[local]``, for pairs grouped
    by ``local`` (``S`` = each row of ``d2`` sorted, ``t`` = the pairs' squared distances):
    the entries below ``t`` by a binary search in the sorted float32 row — half the cost of
    sorting the int64 (distance, index) keys — then :func:`_ranks_of_pairs`."""
    starts = np.flatnonzero(np.r_[True, local[1:] != local[:-1]])
    ends = np.r_[starts[1:], len(local)]
    below = np.empty(len(local), dtype=np.int64)
    upto = np.empty(len(local), dtype=np.int64)
    for s0, s1 in zip(starts, ends):
        below[s0:s1] = np.searchsorted(S[local[s0]], t[s0:s1], side="left")
        upto[s0:s1] = np.searchsorted(S[local[s0]], t[s0:s1], side="right")
    return _ranks_of_pairs(below, upto - below, d2, rows, local, part, t)


def _ranks_of_pairs(below: np.ndarray, equal: np.ndarray, d2: np.ndarray, rows: np.ndarray,
                    local: np.ndarray, part: np.ndarray, t: np.ndarray) -> np.ndarray:
    """0-based neighbour ranks from each pair's counts of row entries below and equal to its
    distance ``t``.

    The rank of :func:`rdx.method.ranks.ranks_of_rows` orders the image itself first,
    then the others by (distance, index). Without ties this is just the number of row
    entries below ``t`` (the image itself, at 0, is one of them). Entries equal to ``t``
    are expected to be the partner and (``t = 0``) the image itself — anything more is a
    tie, and the tied entries with a smaller index than the partner come before it (the
    image itself excepted: it is first anyway). One pass over the row per tied pair: at
    10⁶ images float32 distances tie often, and sorting each tied row's int64
    (distance, index) keys was most of the chance levels' time.
    """
    zero = t == 0                       # then the image itself ties with the partner
    rank = below + zero                 # = 1 + #{others below t}
    for i in np.flatnonzero(equal > 1 + zero):
        row, x, p, me = d2[local[i]], t[i], int(part[i]), int(rows[local[i]])
        before = np.count_nonzero(row[:p] == x)
        if me < p and row[me] == x:     # the image itself, already counted first
            before -= 1
        rank[i] += before
    return rank


def _summarize(values: np.ndarray) -> tuple[float, float, float]:
    if values.size == 0 or np.isnan(values).all():
        nan = float("nan")
        return nan, nan, nan
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(values.mean()), float(lo), float(hi)


def chance_levels(A: Any, B: Any, grid_sizes: Sequence[int], *,
                  dissimilarities: Sequence[str] = DISSIMILARITIES,
                  directions: Sequence[str] = DIRECTIONS, n_draws: int = 1000, seed: int = 0,
                  sigma_neighbor: int | None = None) -> dict[str, dict]:
    """Chance levels for several dissimilarities and directions from one set of draws.

    ``A`` and ``B`` are arrays or :class:`~rdx.evaluation.bsr.PreparedRepresentation`
    (identical results; prepared ones share their norms, duplicate groups and largest
    distance with :func:`~rdx.evaluation.bsr.bsr_scores`). ``sigma_neighbor`` defaults to
    the prepared representations', else 7.

    The draws depend only on ``(n, sorted grid_sizes, n_draws, seed)``, so every
    dissimilarity and direction is scored on the same random grids (and the result equals
    :func:`random_grid_chance` called one at a time).

    Above :data:`CHANCE_POOL_ABOVE` images the grids are drawn from a seeded uniform pool of
    :data:`CHANCE_POOL` images (``pool_images`` in the result; n otherwise). Each grid is
    still a uniform random subset of all n images and its ranks are still within all n —
    only the draws share images now and then (two draws of three 9-image grids share 0.15
    images on average). Why: every image a draw uses costs a distance row against all n
    (O(n·d)); 1000 draws of 27 images were 27 000 rows per model, at 10⁶ images about 12 of
    a whole run's 60 minutes, and 5000 rows are a fifth of that.

    Returns
    -------
    dict
        ``{dissimilarity: {direction: stats}}`` with ``stats`` as in
        :func:`random_grid_chance`; a dissimilarity undefined for the data (local scaling
        with many exact duplicates) maps to ``{"undefined": reason}`` instead.
    """
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise RDXInputError(f"n_draws must be a positive integer, got {n_draws!r}")
    for d in directions:
        if d not in DIRECTION_SIGN:
            raise RDXInputError(f"unknown direction {d!r}; use 'a_over_b' or 'b_over_a'")
    kinds = [check_dissimilarity(kind) for kind in dict.fromkeys(dissimilarities)]
    pa, pb, sigma_k = prepared_pair(A, B, sigma_neighbor)
    n = pa.n
    sizes = _check_sizes(grid_sizes, n)
    rng = np.random.default_rng(seed)
    pool = n
    if n > CHANCE_POOL_ABOVE:
        pool = CHANCE_POOL
        members = np.sort(rng.choice(n, size=pool, replace=False))
        draws = members[draw_grids(pool, sizes, int(n_draws), rng)]
    else:
        draws = draw_grids(n, sizes, int(n_draws), rng)
    I, J = pair_template(sizes)
    anchors = draws[:, I].reshape(-1)
    partners = draws[:, J].reshape(-1)
    vals = {}
    for side, prep in (("a", pa), ("b", pb)):
        vals[side] = (_pair_dissimilarities(prep, anchors, partners, kinds, sigma_k)
                      if len(I) else {})
    out: dict[str, dict] = {}
    for kind in kinds:
        err = next((v[kind] for v in vals.values() if isinstance(v.get(kind), Exception)), None)
        if err is not None:
            out[kind] = {"undefined": str(err)}
            continue
        out[kind] = {}
        if len(I):
            diff = (vals["b"][kind] - vals["a"][kind]).reshape(int(n_draws), len(I))
        for d in directions:
            if not len(I):
                res = {f"{s}_{q}": float("nan") for s in ("bsr", "tsd", "eq")
                       for q in ("mean", "lo", "hi")}
                res.update(n_draws=int(n_draws), n_pairs=0, pool_images=pool)
                out[kind][d] = res
                continue
            signed = DIRECTION_SIGN[d] * diff
            stats = {"bsr": (signed > 0).mean(axis=1), "tsd": signed.mean(axis=1),
                     "eq": (signed == 0).mean(axis=1)}
            res: dict = {}
            for s, v in stats.items():
                res[f"{s}_mean"], res[f"{s}_lo"], res[f"{s}_hi"] = _summarize(v)
            res["n_draws"] = int(n_draws)
            res["n_pairs"] = len(I)
            res["pool_images"] = pool
            out[kind][d] = res
    return out


def random_grid_chance(A: Any, B: Any, grid_sizes: Sequence[int], direction: str,
                       *, dissimilarity: str = "rank", n_draws: int = 1000, seed: int = 0,
                       sigma_neighbor: int | None = None) -> dict:
    """BSR/TSD/EQ of random grids: the chance level of a direction's scores.

    Parameters
    ----------
    A, B : (n, d_A), (n, d_B) arrays or :class:`~rdx.evaluation.bsr.PreparedRepresentation`
        The original representations (same images, same order).
    grid_sizes : list of int
        Sizes of the grids of one draw (usually the sizes of the method's grids for that
        direction, e.g. ``[9, 9, 9]``).
    direction : ``"a_over_b"`` or ``"b_over_a"``
    dissimilarity : one of ``DISSIMILARITIES``
    n_draws : number of random grid sets
    seed : seed of the draws (same seed → same grids, whatever the dissimilarity)
    sigma_neighbor : neighbour of the local scale σ (as in ``bsr_scores``; default 7)

    Returns
    -------
    dict
        ``{"bsr_mean", "bsr_lo", "bsr_hi", "tsd_mean", "tsd_lo", "tsd_hi", "eq_mean",
        "eq_lo", "eq_hi", "n_draws", "n_pairs", "pool_images"}``; lo/hi are the 2.5/97.5
        percentiles over the draws, ``n_pairs`` the ordered pairs per draw, ``pool_images``
        the images the grids were drawn from (:func:`chance_levels`). NaN when the grids
        have no pair.

    Raises
    ------
    RDXInputError
        Bad sizes/direction/dissimilarity, or a dissimilarity undefined for the data.
    """
    res = chance_levels(A, B, grid_sizes, dissimilarities=[dissimilarity],
                        directions=[direction], n_draws=n_draws, seed=seed,
                        sigma_neighbor=sigma_neighbor)[dissimilarity]
    if "undefined" in res:
        raise RDXInputError(res["undefined"])
    return res[direction]

