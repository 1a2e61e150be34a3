"""The statistic of :mod:`rdx.evaluation.significance` and its p-values.

``excess_affinity`` of an explanation with images ``M``: ``(1/|M|) Σ_{i,j∈M} (S_ij − 1)``
with ``S`` the difference affinity. For an RDX explanation over its members it is read from
the fit (``|M|·(mean_affinity − 1)``: the fit's own γ, β, symmetrisation, guidance and
graph); for a grid (baselines) it is computed from neighbour ranks with RDX's locally
biased difference. p-values compare it with null draws through a Student-t predictive tail
on the log scale (:func:`predictive_p`) and, distribution-free, by counting (:func:`p_upper`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import RDXInputError
from ..method.geometry import centered
from ..method.ranks import ranks_of_rows
from ..results.types import DIRECTIONS, MethodResult

STATISTIC = "excess_affinity"
#: Rows of neighbour ranks held at once while scoring explanations (bounds the memory to
#: about 3 × rows × n × 8 bytes).
_RANK_ROWS = 256
#: Statistics are floored here before taking logs (a null maximum can be ≤ 0).
LOG_FLOOR = 1e-6


def resolve_statistic_gamma(gamma: float | None, n: int, gamma_scale: float = 80.0) -> float:
    """γ of the grid statistic: the given value, else ``gamma_scale / n`` (RDX's default)."""
    return float(gamma) if gamma is not None else float(gamma_scale) / n


def explanation_statistics(X: np.ndarray, Y: np.ndarray,
                           groups: Mapping[str, Sequence[Sequence[int]]], *,
                           gamma: float | None = None, beta: float = 5.0) -> dict[str, list[float]]:
    """The excess-affinity statistic of image groups in each direction, from neighbour
    ranks (the statistic of a baseline's grid; module docstring).

    Parameters
    ----------
    X, Y : (n, d_X), (n, d_Y) arrays
        The pair, in the order of the directions: ``a_over_b`` means tight in ``X``.
    groups : {"a_over_b": [[i, ...], ...], "b_over_a": [...]}
        Image indices of each explanation (members, or the grid).
    gamma : float, optional
        γ of the locally biased difference; ``80 / n`` if None.
    beta : float
        β of the affinity ``exp(β·diff)``.

    Returns
    -------
    dict
        ``{direction: [T, ...]}`` in the order of ``groups``; a group of fewer than two
        images has T = 0.
    """
    n = X.shape[0]
    g = resolve_statistic_gamma(gamma, n)
    sets = [(d, j, np.unique(np.asarray(m, dtype=np.int64)))
            for d, ms in groups.items() for j, m in enumerate(ms)]
    for d, _, m in sets:
        if d not in DIRECTIONS:
            raise RDXInputError(f"unknown direction {d!r}; use 'a_over_b' or 'b_over_a'")
        if m.size and (m[0] < 0 or m[-1] >= n):
            raise RDXInputError(f"an explanation indexes images outside 0..{n - 1}")
    sums = {(d, j): 0.0 for d, j, _ in sets}
    rows = np.unique(np.concatenate([m for _, _, m in sets if len(m) >= 2] or
                                    [np.zeros(0, dtype=np.int64)]))
    if rows.size:
        Xc, Yc = centered(X), centered(Y)
        for s in range(0, len(rows), _RANK_ROWS):
            chunk = rows[s:s + _RANK_ROWS]
            RX = ranks_of_rows(Xc, chunk)
            RY = ranks_of_rows(Yc, chunk)
            for d, j, m in sets:
                if len(m) < 2:
                    continue
                inside = np.flatnonzero(np.isin(chunk, m))
                if not inside.size:
                    continue
                rx = RX[inside][:, m].astype(np.float64)
                ry = RY[inside][:, m].astype(np.float64)
                far_minus_tight = (ry - rx) if d == "a_over_b" else (rx - ry)
                diff = np.tanh(g * far_minus_tight / (np.minimum(rx, ry) + 1.0))
                excess = np.expm1(beta * diff)
                # the pair (i, i) has equal ranks (0) in both: excess 0, nothing to remove
                sums[(d, j)] += float(excess.sum())
    out: dict[str, list[float]] = {d: [] for d in groups}
    for d, j, m in sets:
        out[d].append(sums[(d, j)] / len(m) if len(m) >= 2 else 0.0)
    return out


def fit_statistics(result: MethodResult) -> dict[str, list[float]]:
    """``|M|·(mean_affinity − 1)`` of every explanation: the statistic read from the fit's
    own affinity matrix (its γ, β, symmetrisation, guidance and graph)."""
    out: dict[str, list[float]] = {}
    for d in DIRECTIONS:
        if d in result.directions:
            out[d] = [len(e.members) * (float(e.mean_affinity) - 1.0)
                      for e in result.directions[d].explanations]
    return out


def uses_fit_statistic(result: MethodResult, over: str) -> bool:
    """RDX results scored over their members read the statistic from the fit."""
    return over == "members" and all(
        e.members and e.mean_affinity is not None
        for d in result.directions.values() for e in d.explanations)


def explanation_groups(result: MethodResult, over: str = "members"
                        ) -> tuple[dict[str, list[list[int]]], dict[str, list[str]]]:
    """Members of each explanation (its grid when the method has no members or ``over`` is
    ``"grid"``)."""
    groups: dict[str, list[list[int]]] = {}
    used: dict[str, list[str]] = {}
    for d in DIRECTIONS:
        if d not in result.directions:
            continue
        groups[d], used[d] = [], []
        for e in result.directions[d].explanations:
            use_members = bool(e.members) and over == "members"
            groups[d].append(list(e.members) if use_members else list(e.images))
            used[d].append("members" if use_members else "grid")
    return groups, used


def statistics_of(result: MethodResult, X: np.ndarray, Y: np.ndarray, over: str, *,
                  gamma: float, beta: float) -> dict[str, list[float]]:
    """Every explanation's statistic: the fit's own for RDX members, the rank statistic of
    the grid (or members) otherwise."""
    if uses_fit_statistic(result, over):
        return fit_statistics(result)
    groups, _ = explanation_groups(result, over)
    return explanation_statistics(X, Y, groups, gamma=gamma, beta=beta)


# --------------------------------------------------------------------------- p-values

def predictive_p(null: np.ndarray, t: float, sd: float | None = None) -> float:
    """Student-t predictive tail of ``log t`` among ``log null`` (module docstring): the
    probability that one more null draw is at least ``t``, when the log null values are
    normal with unknown mean and variance. ``sd``: the spread of the log null values when
    it is estimated otherwise (:func:`pooled_log_spread`); default their own."""
    from scipy.special import stdtr

    L = np.log(np.maximum(np.asarray(null, dtype=np.float64), LOG_FLOOR))
    m = L.size
    if sd is None:
        sd = float(L.std(ddof=1)) if m > 1 else 0.0
    sd = max(sd, 1e-12)
    z = (math.log(max(float(t), LOG_FLOOR)) - float(L.mean())) / (sd * math.sqrt(1 + 1 / m))
    return float(stdtr(m - 1, -z))


def pooled_log_spread(draws: Sequence[Sequence[float]]) -> float:
    """Spread (standard deviation) of the log strongest statistic between null draws,
    estimated from every rank of the draws' statistics and never below the maxima's own.

    With a handful of draws the sample spread of their maxima alone is a noisy estimate: four
    draws whose maxima happen to agree closely make any stronger explanation look
    significant. Each draw's second, third, … strongest statistics move between draws for
    the same reason as its strongest (one training seed or one noise field per draw), so
    their deviations from their rank's mean are pooled with the maxima's; the larger of the
    pooled and the maxima's own spread is used (conservative when they disagree).
    """
    logs = [np.sort(np.log(np.maximum(np.asarray(d, dtype=np.float64), LOG_FLOOR)))[::-1]
            for d in draws if len(d)]
    if len(logs) < 2:
        return 0.0
    own = float(np.std([v[0] for v in logs], ddof=1))
    ss, df = 0.0, 0
    for r in range(max(len(v) for v in logs)):
        at = np.asarray([v[r] for v in logs if len(v) > r])
        if at.size > 1:
            ss += float(((at - at.mean()) ** 2).sum())
            df += at.size - 1
    return max(own, math.sqrt(ss / df)) if df else own


def p_upper(null: np.ndarray, t: float) -> float:
    """``(1 + #{null ≥ t}) / (1 + #null)``."""
    return float((1 + np.count_nonzero(null >= t)) / (1 + null.size))


def log_z(null: np.ndarray, t: float, sd: float | None = None) -> float | None:
    """``(log t − mean) / sd`` of the log null values (None without a spread); ``sd`` as in
    :func:`predictive_p`."""
    L = np.log(np.maximum(np.asarray(null, dtype=np.float64), LOG_FLOOR))
    if sd is None:
        sd = float(L.std(ddof=1)) if L.size > 1 else 0.0
    if not sd > 0:
        return None
    return (math.log(max(float(t), LOG_FLOOR)) - float(L.mean())) / sd
