"""Binary Success Rate (BSR), total signed difference (TSD) and ties (EQ).

For every grid ``G`` of a direction and every ordered pair ``(a, b)``, ``a ≠ b``, of its
images, compare a pairwise dissimilarity ``δ`` in the two (original, unmapped)
representations:

* ``a_over_b`` (concept tight in A): success if ``δ_A(a,b) < δ_B(a,b)``; gap ``δ_B − δ_A``;
* ``b_over_a`` (tight in B): success if ``δ_A(a,b) > δ_B(a,b)``; gap ``δ_A − δ_B``;
* EQ counts ``δ_A = δ_B``.

``BSR = successes / pairs``, ``TSD = Σ gap / pairs`` and ``EQ = ties / pairs``, pooled over
the direction's grids; ``mean`` averages the two directions. Dissimilarities:

* ``rank``: 1-based neighbour rank of ``b`` in ``a``'s list (asymmetric; ties by index);
* ``max_normalized_euclidean``: ``D(a,b) / max D``;
* ``local_scaling``: ``D(a,b)² / (σ(a)σ(b))``, σ = distance to the 7th neighbour, each
  model with its own distances (the original's LSED mixed the two models).

Scoring many grids: :func:`prepare_representation` does the work that depends on the
representation only — centring, duplicate groups, squared norms, the largest pairwise
distance (on first use) — once, and keeps the distance rows of the grids it has seen, so
that scoring the same grids under all three dissimilarities (and the chance levels of
:mod:`rdx.evaluation.chance`) computes each grid's distances once. :func:`bsr_scores`
accepts arrays or prepared representations and gives identical results for both.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping, Sequence

import numpy as np

from ..validation import as_representation, check_pair
from ..errors import RDXInputError

DISSIMILARITIES = ("rank", "max_normalized_euclidean", "local_scaling")
DIRECTION_SIGN = {"a_over_b": 1.0, "b_over_a": -1.0}  # gap = sign · (δ_B − δ_A)
#: Bytes of grid distance rows a prepared representation keeps (oldest dropped first).
GRID_CACHE_BYTES = 256 * 2**20


class PreparedRepresentation:
    """One representation, prepared once for scoring many grids (see :func:`prepare_representation`).

    Attributes
    ----------
    X : numpy.ndarray
        The centred float32 data, as every dissimilarity uses it.
    distances : rdx.method.geometry.DistanceRows
        Squared distances from any rows to all images (duplicate groups and norms cached).
    sigma_neighbor : int
        Default neighbour of the local scale σ.
    shape : (n_images, n_features)
    """

    def __init__(self, X: Any, *, sigma_neighbor: int = 7, name: str = "X",
                 cache_bytes: int = GRID_CACHE_BYTES):
        from ..method.geometry import DistanceRows, centered

        arr = as_representation(X, name)
        self.shape = tuple(arr.shape)
        self.name = name
        self.sigma_neighbor = _check_sigma(sigma_neighbor)
        self.X = centered(arr)
        self.distances = DistanceRows(self.X)
        self._max_d: float | None = None
        #: how :meth:`max_distance` was found (None until it is used)
        self.max_distance_info: dict[str, Any] | None = None
        self._cache: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self._cache_bytes = int(cache_bytes)

    @property
    def n(self) -> int:
        return int(self.shape[0])

    def max_distance(self) -> float:
        """Largest pairwise Euclidean distance of :attr:`X` — the data scaled by a power of
        two, which ratios do not see — computed on first use, blockwise: over all pairs up
        to :data:`~rdx.method.geometry.EXACT_MAX_DISTANCE_N` images, above that from the
        rows farthest from the origin with a certified upper bound
        (:func:`~rdx.method.geometry.max_squared_distance_bounded`), both recorded in
        :attr:`max_distance_info`."""
        if self._max_d is None:
            from ..method.geometry import (EXACT_MAX_DISTANCE_N, max_squared_distance,
                                           max_squared_distance_bounded)
            if self.n <= EXACT_MAX_DISTANCE_N:
                self._max_d = float(np.sqrt(max_squared_distance(self.X)))
                self.max_distance_info = {"value": self._max_d, "exact": True,
                                          "search": "all pairs"}
            else:
                value, upper = max_squared_distance_bounded(self.X, distances=self.distances)
                self._max_d = float(np.sqrt(value))
                self.max_distance_info = {
                    "value": self._max_d, "upper_bound": float(np.sqrt(upper)),
                    "exact": bool(upper <= value),
                    "search": "rows farthest from the origin against all rows"}
        return self._max_d

    def grid_distances(self, grid: Sequence[int]) -> np.ndarray:
        """``len(grid) × n`` float32 squared distances from the grid's images to all images
        (cached per grid)."""
        g = np.asarray(grid, dtype=np.int64).reshape(-1)
        key = tuple(g.tolist())
        d2 = self._cache.get(key)
        if d2 is None:
            d2 = self.distances(g)
            if d2.nbytes <= self._cache_bytes:
                self._cache[key] = d2
                while sum(v.nbytes for v in self._cache.values()) > self._cache_bytes:
                    self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return d2

    def dissimilarity(self, kind: str, grid: Sequence[int],
                      sigma_neighbor: int | None = None) -> np.ndarray:
        """``δ`` between the grid's images (``len(grid) × len(grid)``, float64)."""
        from ..method.ranks import ranks_in_rows

        g = np.asarray(grid, dtype=np.int64).reshape(-1)
        d2 = self.grid_distances(g)
        if kind == "rank":   # same keys and tie rule as the fit's rank matrix, 1-based
            return ranks_in_rows(d2, g, g).astype(np.float64) + 1.0
        if kind == "max_normalized_euclidean":
            return np.sqrt(d2[:, g].astype(np.float64)) / self.max_distance()
        if kind != "local_scaling":
            raise RDXInputError(f"unknown dissimilarity {kind!r}; use one of {DISSIMILARITIES}")
        k = self.sigma_neighbor if sigma_neighbor is None else int(sigma_neighbor)
        n = d2.shape[1]
        if not 0 < k < n:
            raise RDXInputError(f"sigma_neighbor={k} must be in 1..{n - 1}")
        sigma = np.sqrt(np.partition(d2, k, axis=1)[:, k].astype(np.float64))
        if (sigma == 0).any():
            raise RDXInputError("local_scaling dissimilarity undefined: an image has at least "
                                f"{k} exact duplicates (zero local scale).")
        return d2[:, g].astype(np.float64) / sigma[:, None] / sigma[None, :]


class PreparedDistances(PreparedRepresentation):
    """A precomputed n × n distance matrix prepared for scoring, in place of features
    (``metric="precomputed"``): the same dissimilarities, read from the given distances.

    Parameters
    ----------
    D : (n, n) array
        Checked by :func:`rdx.validation.check_distance_matrix` (not copied).
    """

    def __init__(self, D: Any, *, sigma_neighbor: int = 7, name: str = "X",
                 cache_bytes: int = GRID_CACHE_BYTES):
        from ..method.geometry import PrecomputedDistances
        from ..validation import check_distance_matrix

        arr = check_distance_matrix(D, name)
        self.shape = tuple(arr.shape)
        self.name = name
        self.sigma_neighbor = _check_sigma(sigma_neighbor)
        self.X = None
        self.distances = PrecomputedDistances(arr)
        self._max_d = None
        self.max_distance_info = None
        self._cache = OrderedDict()
        self._cache_bytes = int(cache_bytes)

    def max_distance(self) -> float:
        """Largest entry of the (scaled) distance matrix, exact."""
        if self._max_d is None:
            P = self.distances
            self._max_d = float(np.ldexp(max(float(P.D[s:s + 4096].max())
                                             for s in range(0, P.n, 4096)), P.shift))
            self.max_distance_info = {"value": self._max_d, "exact": True,
                                      "search": "all pairs"}
        return self._max_d


def _check_sigma(k: Any) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise RDXInputError(f"sigma_neighbor must be a positive integer, got {k!r}")
    return int(k)


def prepare_representation(X: Any, *, sigma_neighbor: int = 7,
                           name: str = "X", metric: str = "euclidean"
                           ) -> PreparedRepresentation:
    """Prepare a representation once for scoring many grids.

    Parameters
    ----------
    X : (n, d) array-like, or a :class:`PreparedRepresentation` (returned as is)
        The original representation; with ``metric="precomputed"`` its n × n distance
        matrix (:class:`PreparedDistances`).
    sigma_neighbor : int, default=7
        Neighbour of the local scale σ used when a call does not say.
    name : str
        Name in error messages.

    Returns
    -------
    PreparedRepresentation
        Pass it to :func:`bsr_scores` and :func:`rdx.evaluation.chance.chance_levels`
        instead of the array: same results, without recomputing norms, duplicate groups,
        the largest distance or (for the same grids) the distance rows.
    """
    if isinstance(X, PreparedRepresentation):
        return X
    if metric == "precomputed":
        return PreparedDistances(X, sigma_neighbor=sigma_neighbor, name=name)
    return PreparedRepresentation(X, sigma_neighbor=sigma_neighbor, name=name)


def prepared_pair(A: Any, B: Any, sigma_neighbor: int | None
                  ) -> tuple[PreparedRepresentation, PreparedRepresentation, int]:
    """``A`` and ``B`` prepared (arrays are prepared here, prepared ones reused) and the
    effective σ neighbour: ``sigma_neighbor`` if given, else the prepared ones' (which must
    agree), else 7."""
    if sigma_neighbor is not None:
        sigma_neighbor = _check_sigma(sigma_neighbor)
    defaults = {x.sigma_neighbor for x in (A, B) if isinstance(x, PreparedRepresentation)}
    if sigma_neighbor is None:
        if len(defaults) > 1:
            raise RDXInputError(
                f"A and B were prepared with different sigma_neighbor {sorted(defaults)}; "
                "pass sigma_neighbor explicitly.")
        sigma_neighbor = defaults.pop() if defaults else 7
    pa = prepare_representation(A, sigma_neighbor=sigma_neighbor, name="A")
    pb = prepare_representation(B, sigma_neighbor=sigma_neighbor, name="B")
    check_pair(pa, pb)
    return pa, pb, sigma_neighbor


def check_dissimilarity(kind: str) -> str:
    if kind not in DISSIMILARITIES:
        raise RDXInputError(f"unknown dissimilarity {kind!r}; use one of {DISSIMILARITIES}")
    return kind


def bsr_scores(A: Any, B: Any, grids: Mapping[str, Sequence[Sequence[int]]], *,
               dissimilarity: str = "rank", sigma_neighbor: int | None = None) -> dict:
    """BSR/TSD/EQ per direction and their mean.

    Parameters
    ----------
    A, B : (n, d_A), (n, d_B) arrays, or :class:`PreparedRepresentation`
        The original representations (same images, same order). Prepare them with
        :func:`prepare_representation` when scoring several grid sets or dissimilarities:
        the results are identical and the per-representation work is done once.
    grids : {"a_over_b": [[i, ...], ...], "b_over_a": [...]}
        Image indices of each explanation grid (no-change group excluded by the caller).
    dissimilarity : one of ``DISSIMILARITIES``
    sigma_neighbor : int, optional
        Neighbour of the local scale σ; default: the prepared representations', else 7.

    Returns
    -------
    dict
        ``{direction: {"bsr", "tsd", "eq", "n_pairs"}, "mean": {"bsr", "tsd"}}``; scores are
        NaN for a direction without any pair.

    Examples
    --------
    B holds three tight groups; A keeps two and spreads the third (images 40–59). A grid
    from the spread group is a real difference (B over A); one from a group both models
    hold alike is not:

    >>> import numpy as np
    >>> from rdx.evaluation.bsr import bsr_scores
    >>> rng = np.random.default_rng(0)
    >>> B = np.repeat(np.eye(3) * 8, 20, axis=0) + 0.3 * rng.normal(size=(60, 3))
    >>> A = B.copy()
    >>> A[40:] = B[40:].mean(axis=0) + 4 * rng.normal(size=(20, 3))
    >>> s = bsr_scores(A, B, {"b_over_a": [[40, 41, 42, 43]], "a_over_b": [[0, 1, 2, 3]]})
    >>> round(s["b_over_a"]["bsr"], 3), s["a_over_b"]["bsr"], s["b_over_a"]["n_pairs"]
    (0.583, 0.0, 12)
    """
    check_dissimilarity(dissimilarity)
    pa, pb, sigma_k = prepared_pair(A, B, sigma_neighbor)
    n = pa.n
    out: dict = {}
    for direction, dir_grids in grids.items():
        if direction not in DIRECTION_SIGN:
            raise RDXInputError(f"unknown direction {direction!r}; use 'a_over_b' or 'b_over_a'")
        succ = eq = pairs = 0
        gap = 0.0
        for grid in dir_grids:
            g = np.asarray(grid, dtype=np.int64)
            if g.size and (g.min() < 0 or g.max() >= n):
                raise RDXInputError(f"grid {g.tolist()} has indices outside 0..{n - 1}")
            if len(g) < 2:
                continue
            off = ~np.eye(len(g), dtype=bool)
            signed = (DIRECTION_SIGN[direction]
                      * (pb.dissimilarity(dissimilarity, g, sigma_k)
                         - pa.dissimilarity(dissimilarity, g, sigma_k)))[off]
            succ += int((signed > 0).sum())
            eq += int((signed == 0).sum())
            gap += float(signed.sum())
            pairs += int(off.sum())
        nan = float("nan")
        out[direction] = {"bsr": succ / pairs if pairs else nan, "tsd": gap / pairs if pairs else nan,
                          "eq": eq / pairs if pairs else nan, "n_pairs": pairs}
    dirs = [d for d in ("a_over_b", "b_over_a") if d in out]
    out["mean"] = {k: float(np.mean([out[d][k] for d in dirs])) if dirs else float("nan")
                   for k in ("bsr", "tsd")}
    return out
