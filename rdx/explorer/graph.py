"""Per-image values of the RDX graph for the explorer, computed row block by row block.

The page never holds an n×n matrix. For every image ``i`` it gets, per direction, only:

* its ``k`` nearest neighbours in A and in B (self excluded, by (distance, index) — the
  order of RDX's neighbour ranks), with the rank each has in the *other* model;
* its ``k`` RDX neighbours: the images ``j ≠ i`` with the largest affinity
  ``exp(−β·diff_d[i, j])`` (ties by index), with their ranks in A and B;
* ``diff_d[i, j]`` for all three groups, in the direction's own convention:
  ``diff_a_over_b = f(R_A, R_B)`` and ``diff_b_over_a = −diff_a_over_b`` (aligned runs:
  ``−f(R_{A→B}, R_B)``), so that a negative value always means "closer in the direction's
  tight model than in the other";
* the neighbourhood sums that rank the images: with ``N_i`` = ``i`` and its
  ``neighborhood_size − 1`` nearest images in the tight model (A for ``a_over_b``, B for
  ``b_over_a``), ``affinity_sum(i) = Σ_{a,b∈N_i} exp(−β·diff_d[a, b])`` and
  ``difference_sum(i) = Σ_{a,b∈N_i} diff_d[a, b]``. This is the score RDX's default grid
  selection maximises (``maximize_total_neighborhood_affinity``), taken over all images
  instead of one cluster's members: the top-ranked image's neighbourhood is the strongest
  local difference of the direction.

The graph (similarity function, difference function, γ, β, normalisation, alignment,
guidance, symmetrisation) follows an RDX method's effective parameters (:func:`graph_spec`),
so the values are those the method clustered. Where each row of the difference needs only
the same rows of the two similarity matrices (the paper's graph, any similarity function,
aligned or not), rows are computed block by block with the same functions as
:class:`rdx.RDX` (:func:`rdx.method.ranks.ranks_of_rows`,
:func:`rdx.method.graphs.difference_matrix_`), so values agree with its ``graphs.npz`` up to
float32 rounding, in O(n·k) memory. Guided or symmetrised graphs (RDX v2) need whole
matrices: the method's saved ``graphs.npz`` is used when present, else the method is refitted
(:func:`refit_graph`). Where the values came from is recorded (:attr:`GraphSpec.values`).
"""
from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
from tqdm.auto import tqdm

from ..errors import RDXInputError
from ..method.geometry import (max_squared_distance, squared_distances_between,
                               to_device_centered)
from ..method.graphs import difference_matrix_, resolve_gamma
from ..method.ranks import neighbor_keys_numpy, ranks_of_rows
from ..results.types import DIRECTIONS

#: low 32 bits of a neighbour sort key hold the column index (see rdx.method.ranks)
_INDEX_BITS = 0xFFFFFFFF
#: bytes of one row block's int64 work arrays (bounds the memory of a pass)
_BLOCK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class GraphSpec:
    """The RDX graph the explorer's values come from (recorded in the page)."""

    similarity: str = "neighborhood"
    sigma_neighbor: int = 7
    difference: str = "locally_biased"
    gamma: float = 0.05
    normalize: bool = False
    beta: float = 5.0
    guidance: str | None = None
    aligned: bool = False
    #: ``(R + Rᵀ)/2``-style symmetrisation of the per-model matrices (RDX v2), or None
    symmetrize_ranks: str | None = None
    symmetrize_difference: bool = False
    #: the method whose parameters these are, or "defaults"
    source: str = "defaults"
    #: where the difference values come from: "rows" (computed row block by row block),
    #: "graphs.npz" (the method's saved matrices) or "refit" (the method refitted)
    values: str = "rows"

    @property
    def row_computable(self) -> bool:
        """True when each row of the difference needs only the same rows of the two
        similarity matrices (no guidance, no symmetrisation)."""
        return self.guidance is None and self.symmetrize_ranks is None \
            and not self.symmetrize_difference

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rdx_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The subset of a method's recorded params that :class:`rdx.RDX` takes."""
    from ..method.estimator import RDX

    names = set(inspect.signature(RDX.__init__).parameters) - {"self"}
    return {k: v for k, v in dict(params or {}).items() if k in names}


def graph_spec(params: Mapping[str, Any] | None, n: int, source: str = "defaults") -> GraphSpec:
    """The graph of an RDX method from its ``explanations.json`` params (resolved values
    first), RDX's defaults for anything missing."""
    from ..method.estimator import RDX

    p = dict(params or {})
    est = RDX(**rdx_params(p))
    gamma = p.get("gamma_resolved")
    if gamma is None:
        gamma = resolve_gamma(est.gamma, float(est.gamma_scale), n)
    normalize = p.get("normalize_diff_resolved")
    if normalize is None:
        normalize = (est.difference == "standard") if est.normalize_diff is None \
            else bool(est.normalize_diff)
    settings = est.variant_settings() if hasattr(est, "variant_settings") else {}
    return GraphSpec(similarity=str(est.similarity), sigma_neighbor=int(est.sigma_neighbor),
                     difference=str(est.difference), gamma=float(gamma),
                     normalize=bool(normalize), beta=float(est.beta),
                     guidance=getattr(est, "guidance", None),
                     aligned=bool(getattr(est, "align_representations", False)),
                     symmetrize_ranks=settings.get("symmetrize_ranks"),
                     symmetrize_difference=bool(getattr(est, "symmetrize_difference", False)),
                     source=source)


@dataclass
class NeighbourTables:
    """What :func:`neighbour_tables` computes (all arrays n×k unless said otherwise)."""

    k: int
    neighborhood_size: int
    #: "a"/"b": the k nearest images in A / in B
    nearest: dict[str, np.ndarray]
    #: direction → the k RDX neighbours (largest affinity first)
    rdx: dict[str, np.ndarray]
    #: group → (rank in A, rank in B) of the group's neighbours; groups "a", "b",
    #: "rdx_a_over_b", "rdx_b_over_a"
    ranks: dict[str, tuple[np.ndarray, np.ndarray]]
    #: direction → group ("a", "b", "rdx") → diff_d[i, neighbour]
    diff: dict[str, dict[str, np.ndarray]]
    #: direction → (n,) neighbourhood affinity sums / difference sums
    affinity_sum: dict[str, np.ndarray]
    difference_sum: dict[str, np.ndarray]
    spec: GraphSpec = field(default_factory=GraphSpec)
    #: direction → the whole n×n diff_d (float16), when asked (``keep_matrix``); without
    #: alignment only "a_over_b" (b_over_a is its negative)
    matrix: dict[str, np.ndarray] | None = None


def _block_rows(n: int) -> int:
    return int(max(1, min(n, _BLOCK_BYTES // (8 * max(n, 1)))))


def smallest_by_value_then_index(vals: np.ndarray, k: int) -> np.ndarray:
    """Per row, the column indices of the ``k`` smallest values, ties by smaller index, in
    (value, index) order. Exactly ``k`` per row, deterministic (unlike ``argpartition``)."""
    b, n = vals.shape
    kth = np.partition(vals, k - 1, axis=1)[:, k - 1:k]
    less = vals < kth
    equal = vals == kth
    need = k - less.sum(axis=1, keepdims=True)
    take = less | (equal & (np.cumsum(equal, axis=1) <= need))
    cols = np.nonzero(take)[1].reshape(b, k)          # row-major: index order within a row
    v = np.take_along_axis(vals, cols, axis=1)
    order = np.lexsort((cols, v), axis=1)
    return np.take_along_axis(cols, order, axis=1)


def _signed(f: np.ndarray, direction: str) -> np.ndarray:
    """A difference in the a_over_b convention → the direction's own convention."""
    return f if direction == "a_over_b" else -f


class RowDifference:
    """Rows of the difference of a graph without guidance or symmetrisation, computed from
    the representations on demand (no n×n matrix)."""

    def __init__(self, X: dict[str, torch.Tensor], spec: GraphSpec):
        if not spec.row_computable:
            raise ValueError("this graph needs whole matrices (guidance or symmetrisation)")
        self.X, self.spec, self.n = X, spec, X["a"].shape[0]
        self.pairs = ({"a_over_b": ("a", "b_mapped"), "b_over_a": ("a_mapped", "b")}
                      if spec.aligned else {"a_over_b": ("a", "b"), "b_over_a": ("a", "b")})
        self._max: dict[str, float] = {}
        self._sigma: dict[str, np.ndarray] = {}
        self._scale: dict[str, float] = {}

    def plain(self, direction: str) -> bool:
        """True when the direction's graph is exactly f(ranks of A, ranks of B)."""
        return self.spec.similarity == "neighborhood" and self.pairs[direction] == ("a", "b")

    def _sigma_of(self, m: str) -> np.ndarray:
        if m not in self._sigma:
            pos = self.spec.sigma_neighbor
            if not 0 < pos < self.n:
                raise RDXInputError(f"sigma_neighbor={pos} must be between 1 and "
                                    f"n_images-1={self.n - 1}.")
            out = np.empty(self.n, dtype=np.float32)
            step = _block_rows(self.n)
            for s in range(0, self.n, step):
                rows = np.arange(s, min(self.n, s + step))
                d2 = squared_distances_between(self.X[m], rows)
                out[rows] = np.sqrt(np.partition(d2, pos, axis=1)[:, pos])
            self._sigma[m] = out
        return self._sigma[m]

    def similarity(self, m: str, rows: np.ndarray) -> np.ndarray:
        """Rows of the model's similarity matrix (what :func:`rdx.method.graphs.
        similarity_matrix` gives)."""
        sim = self.spec.similarity
        if sim == "neighborhood":
            return ranks_of_rows(self.X[m], rows).astype(np.float32)
        d2 = squared_distances_between(self.X[m], rows)
        if sim == "max_normalized_distance":
            if m not in self._max:
                self._max[m] = float(np.sqrt(max_squared_distance(self.X[m])))
            return np.sqrt(d2) / np.float32(self._max[m])
        if sim == "zp_local_scaling":
            sig = self._sigma_of(m)
            return d2 / sig[rows][:, None] / sig[None, :]
        raise RDXInputError(f"unknown similarity function {sim!r}")

    def _f(self, direction: str, rows: np.ndarray, Ra: np.ndarray | None = None,
           Rb: np.ndarray | None = None) -> np.ndarray:
        first, second = self.pairs[direction]
        if Ra is None or not self.plain(direction):
            Ra, Rb = self.similarity(first, rows), self.similarity(second, rows)
        f = difference_matrix_(torch.from_numpy(np.array(Ra, dtype=np.float32)),
                               torch.from_numpy(np.asarray(Rb, dtype=np.float32)),
                               self.spec.difference, gamma=self.spec.gamma, normalize=False)
        return f.numpy()

    def scale(self, direction: str) -> float:
        """1 / max|f| over the whole matrix when the difference is normalised, else 1."""
        if not self.spec.normalize:
            return 1.0
        key = direction if self.spec.aligned else "shared"
        if key not in self._scale:
            step, peak = _block_rows(self.n), 0.0
            for s in range(0, self.n, step):
                rows = np.arange(s, min(self.n, s + step))
                peak = max(peak, float(np.abs(self._f(direction, rows)).max()))
            self._scale[key] = 1.0 / peak if peak > 0 else 1.0
        return self._scale[key]

    def __call__(self, direction: str, rows: np.ndarray, RA: np.ndarray, RB: np.ndarray
                 ) -> np.ndarray:
        """diff_d rows in the direction's own convention (see module docstring); ``RA``,
        ``RB`` are the rows' neighbour ranks in A and B (reused when they are the graph's)."""
        f = self._f(direction, rows, RA, RB) * np.float32(self.scale(direction))
        return _signed(f, direction)


class MatrixDifference:
    """Rows of a whole difference matrix (a method's ``graphs.npz`` or a refit)."""

    def __init__(self, diff_a_over_b: np.ndarray, diff_b_over_a_graph: np.ndarray | None = None):
        self.f = {"a_over_b": diff_a_over_b,
                  "b_over_a": diff_a_over_b if diff_b_over_a_graph is None
                  else diff_b_over_a_graph}

    def __call__(self, direction: str, rows: np.ndarray, RA: np.ndarray, RB: np.ndarray
                 ) -> np.ndarray:
        return _signed(np.asarray(self.f[direction][rows], dtype=np.float32), direction)


def refit_graph(A: np.ndarray, B: np.ndarray, params: Mapping[str, Any], *,
                labels: np.ndarray | None, alignment: tuple[np.ndarray, np.ndarray] | None,
                seed: int) -> MatrixDifference:
    """The whole difference matrices of an RDX method, by fitting it again (for graphs the
    rows cannot give: guidance, symmetrisation) — n×n memory."""
    from ..method.estimator import RDX

    p = rdx_params(params)
    p.update(keep_graphs=True, device="cpu", verbose=0)
    p.setdefault("random_state", int(seed))   # the recorded one reproduces the probes exactly
    est = RDX(**p)
    fit_kw: dict[str, Any] = {}
    if p.get("align_representations"):
        if alignment is None:
            raise RDXInputError("the RDX method was run with align_representations but the "
                                "comparison has no alignment.npz; re-run it with --force.")
        fit_kw["alignment"] = (alignment[0], alignment[1], {})
    est.fit(A, B, labels=labels, **fit_kw)
    g = est.graphs_
    return MatrixDifference(g["diff_a_over_b"], g.get("diff_b_over_a_graph"))


def nearest_neighbours(X: torch.Tensor, k: int, step: int) -> np.ndarray:
    """The ``k`` nearest images of every image (self excluded) by (squared distance,
    index): the images of ranks 1..k of :func:`rdx.method.ranks.ranks_of_rows`."""
    n = X.shape[0]
    out = np.empty((n, k), dtype=np.int64)
    for s in range(0, n, step):
        rows = np.arange(s, min(n, s + step))
        keys = neighbor_keys_numpy(squared_distances_between(X, rows), rows)
        part = np.partition(keys, k, axis=1)[:, :k + 1]
        part.sort(axis=1)
        out[rows] = (part[:, 1:] & _INDEX_BITS)   # position 0 is the image itself
    return out


def neighbour_tables(A: np.ndarray, B: np.ndarray, spec: GraphSpec, *, k: int = 12,
                     neighborhood_size: int = 9,
                     alignment: tuple[np.ndarray, np.ndarray] | None = None,
                     matrices: MatrixDifference | None = None,
                     progress: bool = False, keep_matrix: bool = False) -> NeighbourTables:
    """Neighbour groups, their ranks and differences, and the neighbourhood sums of every
    image (see module docstring).

    The difference comes from ``matrices`` when given (a method's saved or refitted n×n
    graph), else it is computed row block by row block from A and B (``spec`` must then be
    :attr:`GraphSpec.row_computable`); memory is then O(n·k) plus one bounded row block.
    ``keep_matrix`` also keeps the whole difference (float16, n×n per stored direction) for
    the page's selection statistics.
    """
    n = len(A)
    if n < 3:
        raise RDXInputError(f"the explorer needs at least 3 images, got {n}.")
    k = int(min(k, n - 1))
    s_nb = int(min(max(neighborhood_size, 1), n))
    kk = max(k, s_nb - 1)
    dev = torch.device("cpu")
    X = {"a": to_device_centered(A, dev), "b": to_device_centered(B, dev)}
    if matrices is None and spec.aligned:
        if alignment is None:
            raise RDXInputError(f"{spec.source} was run with align_representations but the "
                                "comparison has no alignment.npz; re-run it with "
                                "`rdx run --config CONFIG --force`.")
        X["a_mapped"] = to_device_centered(alignment[0], dev)
        X["b_mapped"] = to_device_centered(alignment[1], dev)
    source = matrices if matrices is not None else RowDifference(X, spec)
    step = _block_rows(n)
    near = {m: nearest_neighbours(X[m], kk, step) for m in ("a", "b")}
    # the pairs (a, b) of every neighbourhood N_i × N_i, grouped by row a
    hood_pairs = {}
    for d, tight in (("a_over_b", "a"), ("b_over_a", "b")):
        N = np.concatenate([np.arange(n)[:, None], near[tight][:, :s_nb - 1]], axis=1)
        rows = np.repeat(N, s_nb, axis=1).reshape(-1)          # N[i, p] for every q
        cols = np.tile(N, (1, s_nb)).reshape(-1)               # N[i, q] for every p
        owner = np.repeat(np.arange(n), s_nb * s_nb)
        order = np.argsort(rows, kind="stable")
        hood_pairs[d] = (rows[order], cols[order], owner[order])
    nearest = {m: near[m][:, :k] for m in ("a", "b")}
    rdx = {d: np.empty((n, k), dtype=np.int64) for d in DIRECTIONS}
    ranks = {grp: (np.empty((n, k), np.int64), np.empty((n, k), np.int64))
             for grp in ("a", "b", *(f"rdx_{d}" for d in DIRECTIONS))}
    diff = {d: {grp: np.empty((n, k), np.float32) for grp in ("a", "b", "rdx")}
            for d in DIRECTIONS}
    aff_sum = {d: np.zeros(n) for d in DIRECTIONS}
    diff_sum = {d: np.zeros(n) for d in DIRECTIONS}
    kept = None
    if keep_matrix:
        kept = {d: np.empty((n, n), np.float16)
                for d in (DIRECTIONS if spec.aligned else DIRECTIONS[:1])}
    if isinstance(source, RowDifference):
        for d in DIRECTIONS:
            source.scale(d)  # a normalised difference needs its global maximum first
    for s in tqdm(range(0, n, step), desc="explorer: neighbours", disable=not progress,
                  leave=False):
        rows = np.arange(s, min(n, s + step))
        RA, RB = ranks_of_rows(X["a"], rows), ranks_of_rows(X["b"], rows)
        take = lambda M, idx: np.take_along_axis(M, idx, axis=1)  # noqa: E731
        ranks["a"][0][rows], ranks["a"][1][rows] = take(RA, nearest["a"][rows]), \
            take(RB, nearest["a"][rows])
        ranks["b"][0][rows], ranks["b"][1][rows] = take(RA, nearest["b"][rows]), \
            take(RB, nearest["b"][rows])
        shared = None
        for d in DIRECTIONS:
            # without alignment both directions share one graph (b_over_a = −a_over_b)
            if shared is not None:
                D = -shared
            else:
                D = source(d, rows, RA, RB)
                if not spec.aligned:
                    shared = D
                if kept is not None:
                    kept[d][rows] = D
            work = D.copy()
            work[np.arange(len(rows)), rows] = np.inf          # never one's own neighbour
            best = smallest_by_value_then_index(work, k)
            rdx[d][rows] = best
            ranks[f"rdx_{d}"][0][rows] = take(RA, best)
            ranks[f"rdx_{d}"][1][rows] = take(RB, best)
            for grp, idx in (("a", nearest["a"][rows]), ("b", nearest["b"][rows]), ("rdx", best)):
                diff[d][grp][rows] = take(D, idx)
            pr, pc, po = hood_pairs[d]
            lo, hi = np.searchsorted(pr, [s, s + len(rows)])
            vals = D[pr[lo:hi] - s, pc[lo:hi]].astype(np.float64)
            aff_sum[d] += np.bincount(po[lo:hi], weights=np.exp(-spec.beta * vals), minlength=n)
            diff_sum[d] += np.bincount(po[lo:hi], weights=vals, minlength=n)
    return NeighbourTables(k=k, neighborhood_size=s_nb, nearest=nearest, rdx=rdx, ranks=ranks,
                           diff=diff, affinity_sum=aff_sum, difference_sum=diff_sum, spec=spec,
                           matrix=kept)
