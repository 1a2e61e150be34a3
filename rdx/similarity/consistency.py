"""Consistency of representational similarity across datasets (Ciernik et al., ICML 2025).

Given one model × model similarity matrix ``S^D`` per dataset ``D`` (same models, same
measure), the consistency of a set ``P`` of unordered model pairs between datasets ``D`` and
``D'`` is::

    r_P(D, D') = corr( (S^D_ab)_{(a,b) ∈ P}, (S^D'_ab)_{(a,b) ∈ P} )

with the same pair order for both datasets — a correlation of *off-diagonal (upper-triangle)
entries* restricted to ``P``, not a matrix-level RSA. Pearson is the paper's default and
Spearman is also reported. It is computed for every one of the ``|𝓓|(|𝓓|−1)/2`` dataset
pairs; the distribution over dataset pairs (median, quartiles) is the quantity studied.

Choices of ``P`` (:func:`model_pairs`, :func:`standard_pair_sets`): all pairs; model-set
pairs ``A × B`` for the values of a category such as the training objective (within-set when
``A = B``); explicit include/exclude model lists; an anchor model against all others or
against one category value.

Deviations from the paper's notebooks, on purpose
-------------------------------------------------
* Pair sets with fewer than ``min_pairs = 3`` pairs are skipped. The paper skipped only sets
  with ≤ 1 pair, but a correlation of 2 points is always ±1 and carries no information.
* A non-finite entry (an undefined similarity) drops that pair for the dataset pairs where
  it occurs (pairwise-complete); the number of pairs used is reported with every value.
  A constant vector gives NaN instead of a warning-and-NaN from scipy.
* Asymmetric measures are symmetrised, ``½(S_ab + S_ba)``, before the upper triangle is
  taken (the paper's measures are all symmetric, so this changes nothing for them).
* :func:`summarize` also reports the Fisher-z mean (the paper averaged raw r); the paper's
  rank-sum tests over overlapping dataset pairs are not reproduced (the 253 values are not
  independent).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from ..errors import RDXInputError

CORRELATIONS = ("pearson", "spearman")
#: Anchor models of the paper's anchor analyses, by the ids of models_paper.yaml.
PAPER_ANCHORS = ("OpenCLIP_RN50_openai", "OpenCLIP_ViT-L-14_openai", "resnet50",
                 "vit_large_patch16_224", "simclr-rn50", "dino-vit-base-p16",
                 "dinov2-vit-large-p14", "mae-vit-large-p16")

Pair = tuple[int, int]


# --------------------------------------------------------------------------- correlations

def _rank(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), as scipy.stats.rankdata(method='average')."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    # boundaries of runs of equal values
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(xs)]
    avg = (starts + ends - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def correlation(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                method: str = "pearson") -> float:
    """Pearson or Spearman correlation in float64; NaN for < 2 points or a constant input.

    Non-finite entries are not accepted here; :func:`consistency` removes them first.
    """
    if method not in CORRELATIONS:
        raise RDXInputError(f"method={method!r} is not one of {CORRELATIONS}.")
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise RDXInputError(f"correlation needs two 1-D vectors of equal length, got shapes "
                            f"{x.shape} and {y.shape}.")
    if len(x) < 2:
        return float("nan")
    if method == "spearman":
        x, y = _rank(x), _rank(y)
    x = x - x.mean()
    y = y - y.mean()
    den = math.sqrt(float(x @ x) * float(y @ y))
    if not den > 0:
        return float("nan")
    return float(np.clip(float(x @ y) / den, -1.0, 1.0))


# --------------------------------------------------------------------------- pair sets

def _as_groups(value: str | Iterable[str] | None) -> set[str] | None:
    if value is None:
        return None
    return {value} if isinstance(value, str) else {str(v) for v in value}


def model_pairs(model_ids: Sequence[str], *, groups: Mapping[str, str] | None = None,
                between: tuple[str | Iterable[str], str | Iterable[str]] | None = None,
                anchor: str | None = None, anchor_group: str | Iterable[str] | None = None,
                include: Iterable[str] | None = None, exclude: Iterable[str] | None = None
                ) -> list[Pair]:
    """Unordered model pairs ``(i, j)``, ``i < j`` (indices into ``model_ids``).

    Parameters
    ----------
    model_ids : sequence of str
        The matrix order.
    groups : dict model id → group value, optional
        A category, e.g. the training objective of every model. Needed for ``between`` and
        ``anchor_group``.
    between : (A, B), optional
        Only pairs with one model in group(s) ``A`` and the other in group(s) ``B``; each side
        is one value or a collection of values (``("image-text", ("image-text",
        "supervised"))`` is the paper's "Img-Txt vs Img-Txt ∪ Sup"). ``A == B`` gives
        within-group pairs.
    anchor : str, optional
        Only pairs that contain this model.
    anchor_group : value or values, optional
        With ``anchor``: only partners in these groups.
    include, exclude : iterable of str, optional
        Restrict the models considered before anything else.

    Returns
    -------
    list of (int, int)
        Sorted, without duplicates.
    """
    ids = [str(m) for m in model_ids]
    index = {m: i for i, m in enumerate(ids)}
    allowed = set(ids)
    for name, chosen in (("include", include), ("exclude", exclude), ("anchor", [anchor]
                                                                     if anchor else None)):
        if chosen is None:
            continue
        unknown = sorted(set(chosen) - set(ids))
        if unknown:
            raise RDXInputError(f"{name} names models that are not in the matrix: {unknown}; "
                                f"known: {ids}.")
    if include is not None:
        allowed &= set(include)
    if exclude is not None:
        allowed -= set(exclude)
    need_groups = between is not None or anchor_group is not None
    if need_groups:
        if groups is None:
            raise RDXInputError("between/anchor_group need groups (a dict model id → group, "
                                "e.g. the objective of each model).")
        missing = sorted(m for m in allowed if m not in groups)
        if missing:
            raise RDXInputError(f"groups gives no value for models {missing}.")
    if between is not None:
        if not (isinstance(between, (tuple, list)) and len(between) == 2):
            raise RDXInputError(f"between must be a pair (A, B) of group values, got {between!r}.")
        ga, gb = _as_groups(between[0]), _as_groups(between[1])
        present = {groups[m] for m in allowed}   # type: ignore[index]
        unknown = sorted((ga | gb) - present)
        if unknown:
            raise RDXInputError(f"groups {unknown} have no models; groups present: "
                                f"{sorted(present)}.")
    if anchor_group is not None and anchor is None:
        raise RDXInputError("anchor_group needs anchor=<model id>.")
    if anchor is not None and anchor not in allowed:
        raise RDXInputError(f"anchor {anchor!r} is excluded by include/exclude.")
    ag = _as_groups(anchor_group)

    out = []
    for a, b in combinations(sorted(allowed, key=index.__getitem__), 2):
        if between is not None:
            g1, g2 = groups[a], groups[b]   # type: ignore[index]
            if not ((g1 in ga and g2 in gb) or (g1 in gb and g2 in ga)):
                continue
        if anchor is not None:
            if anchor not in (a, b):
                continue
            other = b if a == anchor else a
            if ag is not None and groups[other] not in ag:   # type: ignore[index]
                continue
        out.append((index[a], index[b]))
    return sorted(out)


@dataclass
class PairSet:
    """A named set of model pairs and how it was chosen."""

    name: str
    pairs: list[Pair]
    kind: str = "all"                  # all | within | across | anchor | custom
    info: dict = field(default_factory=dict)


def standard_pair_sets(model_ids: Sequence[str], categories: Mapping[str, Mapping[str, str]]
                       | None = None, *, anchors: Iterable[str] = (), min_pairs: int = 3
                       ) -> list[PairSet]:
    """The paper's pair sets: all pairs; per category, every ``A × B`` of its values
    (``A ≤ B`` in sorted order, within-set when equal); per anchor, the anchor against all
    other models and against each value of every category. Sets with fewer than
    ``min_pairs`` pairs are left out.

    ``categories`` maps a category name (e.g. ``"objective"``) to ``{model id: value}``.
    """
    if isinstance(min_pairs, bool) or not isinstance(min_pairs, int) or min_pairs < 2:
        raise RDXInputError(f"min_pairs must be an integer ≥ 2, got {min_pairs!r}.")
    ids = list(model_ids)
    sets = [PairSet("all", model_pairs(ids), "all")]
    for cat, groups in (categories or {}).items():
        values = sorted({groups[m] for m in ids if m in groups})
        usable = [m for m in ids if m in groups]
        for i, va in enumerate(values):
            for vb in values[i:]:
                pairs = model_pairs(ids, groups=groups, between=(va, vb), include=usable)
                kind = "within" if va == vb else "across"
                sets.append(PairSet(f"{cat}: {va} × {vb}", pairs, kind,
                                    {"category": cat, "group_a": va, "group_b": vb}))
    for anchor in anchors:
        if anchor not in ids:
            continue
        sets.append(PairSet(f"anchor {anchor} × all", model_pairs(ids, anchor=anchor),
                            "anchor", {"anchor": anchor, "group_b": "all"}))
        for cat, groups in (categories or {}).items():
            usable = [m for m in ids if m in groups]
            if anchor not in usable:
                continue
            for v in sorted({groups[m] for m in usable}):
                sets.append(PairSet(
                    f"anchor {anchor} × {cat}: {v}",
                    model_pairs(ids, groups=groups, anchor=anchor, anchor_group=v,
                                include=usable),
                    "anchor", {"anchor": anchor, "category": cat, "group_b": v}))
    return [s for s in sets if len(s.pairs) >= min_pairs]


# --------------------------------------------------------------------------- consistency

def pair_values(S: np.ndarray, pairs: Sequence[Pair] | None = None) -> np.ndarray:
    """``(S_ab)`` for the pairs (all ``a < b`` by default), symmetrised as ``½(S_ab + S_ba)``."""
    S = np.asarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise RDXInputError(f"a similarity matrix must be square, got shape {S.shape}.")
    if pairs is None:
        pairs = list(combinations(range(S.shape[0]), 2))
    if len(pairs) == 0:
        return np.empty(0)
    idx = np.asarray(pairs, dtype=np.int64)
    if idx.ndim != 2 or idx.shape[1] != 2 or idx.min() < 0 or idx.max() >= S.shape[0]:
        raise RDXInputError(f"pairs must be (i, j) indices into a {S.shape[0]}×{S.shape[0]} "
                            "matrix.")
    return 0.5 * (S[idx[:, 0], idx[:, 1]] + S[idx[:, 1], idx[:, 0]])


def consistency(S_a: np.ndarray, S_b: np.ndarray, pairs: Sequence[Pair] | None = None,
                method: str = "pearson") -> tuple[float, int]:
    """``r_P(D, D')`` of two matrices over the same models; returns ``(r, pairs used)``.

    Pairs with a non-finite value in either matrix are dropped; NaN if fewer than 2 remain or
    one vector is constant.
    """
    S_a, S_b = np.asarray(S_a, dtype=np.float64), np.asarray(S_b, dtype=np.float64)
    if S_a.shape != S_b.shape:
        raise RDXInputError(f"matrices of different shapes {S_a.shape} and {S_b.shape}; they "
                            "must cover the same models in the same order (see align_matrices).")
    va, vb = pair_values(S_a, pairs), pair_values(S_b, pairs)
    ok = np.isfinite(va) & np.isfinite(vb)
    return correlation(va[ok], vb[ok], method), int(ok.sum())


def align_matrices(matrices: Mapping[str, tuple[np.ndarray, Sequence[str]]],
                   order: Sequence[str] | None = None
                   ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Restrict every dataset's matrix to the models all of them have, in one order.

    ``matrices`` maps dataset → (matrix, its model ids). The common order is ``order``
    filtered to the shared models, else the first dataset's order.
    """
    if not matrices:
        raise RDXInputError("no similarity matrices given.")
    id_sets = [set(ids) for _, ids in matrices.values()]
    common = set.intersection(*id_sets)
    first = list(next(iter(matrices.values()))[1])
    ordered = [m for m in (order if order is not None else first) if m in common]
    if len(ordered) < 3:
        raise RDXInputError(f"only {len(ordered)} models are present in every dataset's matrix "
                            f"({sorted(common)}); consistency needs at least 3 shared models.")
    out = {}
    for ds, (S, ids) in matrices.items():
        ids = list(ids)
        S = np.asarray(S, dtype=np.float64)
        if S.shape != (len(ids), len(ids)):
            raise RDXInputError(f"matrix of {ds!r} has shape {S.shape} for {len(ids)} models.")
        pos = [ids.index(m) for m in ordered]
        out[ds] = S[np.ix_(pos, pos)]
    return out, ordered


def consistency_table(matrices: Mapping[str, np.ndarray], pairs: Sequence[Pair] | None = None,
                      methods: Sequence[str] = CORRELATIONS) -> list[dict]:
    """One row per dataset pair ``(D, D')`` (dataset order, ``D`` before ``D'``):
    ``{"dataset_a", "dataset_b", "n_pairs", <method>: r, ...}``."""
    for m in methods:
        if m not in CORRELATIONS:
            raise RDXInputError(f"method {m!r} is not one of {CORRELATIONS}.")
    names = list(matrices)
    if len(names) < 2:
        raise RDXInputError(f"consistency compares datasets and needs at least 2 matrices; "
                            f"got {len(names)} ({names}).")
    rows = []
    for da, db in combinations(names, 2):
        row: dict = {"dataset_a": da, "dataset_b": db}
        for m in methods:
            r, used = consistency(matrices[da], matrices[db], pairs, m)
            row[m] = r
            row["n_pairs"] = used
        rows.append(row)
    return rows


def dataset_consistency_matrix(matrices: Mapping[str, np.ndarray],
                               pairs: Sequence[Pair] | None = None, method: str = "pearson"
                               ) -> tuple[np.ndarray, list[str]]:
    """The ``|𝓓| × |𝓓|`` matrix ``C_{DD'} = r_P(D, D')`` (diagonal 1; notebook 4.6)."""
    names = list(matrices)
    C = np.eye(len(names))
    for (i, da), (j, db) in combinations(enumerate(names), 2):
        C[i, j] = C[j, i] = consistency(matrices[da], matrices[db], pairs, method)[0]
    return C, names


def summarize(values: Iterable[float]) -> dict:
    """Median, quartiles, mean, std, range and Fisher-z mean of the finite values."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    n_all = len(v)
    v = v[np.isfinite(v)]
    out = {"n": len(v), "n_undefined": int(n_all - len(v))}
    if len(v) == 0:
        return {**out, **dict.fromkeys(("median", "q1", "q3", "mean", "std", "min", "max",
                                         "fisher_z_mean"))}
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    z = np.arctanh(np.clip(v, -1 + 1e-12, 1 - 1e-12))
    return {**out, "median": float(med), "q1": float(q1), "q3": float(q3),
            "mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()),
            "max": float(v.max()), "fisher_z_mean": float(np.tanh(z.mean()))}


def similarity_performance_correlation(S: np.ndarray, model_ids: Sequence[str],
                                       accuracy: Mapping[str, float],
                                       pairs: Sequence[Pair] | None = None,
                                       method: str = "spearman") -> tuple[float, int]:
    """Correlation over model pairs of ``S_ab`` and ``|acc_a − acc_b|`` (paper Sec. 4.7).

    Models without an accuracy are left out; returns ``(r, pairs used)``. A negative value
    means: more similar representations, smaller performance gap.
    """
    ids = list(model_ids)
    if pairs is None:
        pairs = list(combinations(range(len(ids)), 2))
    keep = [(i, j) for i, j in pairs
            if ids[i] in accuracy and ids[j] in accuracy
            and accuracy[ids[i]] is not None and accuracy[ids[j]] is not None]
    if not keep:
        return float("nan"), 0
    s = pair_values(S, keep)
    gap = np.array([abs(float(accuracy[ids[i]]) - float(accuracy[ids[j]])) for i, j in keep])
    ok = np.isfinite(s) & np.isfinite(gap)
    return correlation(s[ok], gap[ok], method), int(ok.sum())


__all__ = ["CORRELATIONS", "PAPER_ANCHORS", "PairSet", "align_matrices", "consistency",
           "consistency_table", "correlation", "dataset_consistency_matrix", "model_pairs",
           "pair_values", "similarity_performance_correlation", "standard_pair_sets",
           "summarize"]
