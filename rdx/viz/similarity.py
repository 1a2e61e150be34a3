"""Figures of the model × model similarity study (``rdx matrix``, ``rdx consistency``).

* :func:`similarity_heatmap_figure`: one dataset's model × model matrix of one measure,
  models grouped by a category (e.g. the training objective) when one is given, values
  written in the cells for up to 12 models.
* :func:`similarity_vs_performance_figure`: for one dataset and measure, every model pair
  as a point — its similarity against the gap between the two models' linear-probe
  accuracies — with the correlation of the two (the paper's similarity–performance link:
  a negative value means that more similar models perform more alike).

matplotlib's object API on an Agg canvas (headless); written atomically by the callers
through :func:`rdx.viz.save.save_figure`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np
from matplotlib.figure import Figure

from ..errors import RDXInputError
from .style import FONT_CELL, FONT_LABEL, FONT_NOTE, FONT_SMALL, FONT_TITLE, class_colors


def order_models(ids: Sequence[str], groups: Mapping[str, str] | None) -> list[int]:
    """Positions of the models grouped by their category (unknown last), in their order
    within a group; the given order without categories."""
    if not groups:
        return list(range(len(ids)))
    return sorted(range(len(ids)), key=lambda i: (groups.get(ids[i], "~"), i))


def similarity_heatmap_figure(values: np.ndarray, model_ids: Sequence[str], *,
                              title: str = "", higher_is_more_similar: bool = True,
                              groups: Mapping[str, str] | None = None,
                              annotate_max: int = 12) -> Figure:
    """Heat map of a model × model matrix (NaN cells blank). ``groups``: model id → category
    value; the models are then ordered by it and the group boundaries drawn. The colour
    scale runs from the least to the most similar value (reversed for measures where
    lower means more similar, so that dark is always "more similar")."""
    V = np.asarray(values, dtype=np.float64)
    ids = list(model_ids)
    if V.shape != (len(ids), len(ids)):
        raise RDXInputError(f"a {V.shape} matrix for {len(ids)} models: one row and column "
                            "per model expected.")
    order = order_models(ids, groups)
    M = V[np.ix_(order, order)]
    names = [ids[i] for i in order]
    size = max(4.0, 0.32 * len(ids) + 2.5)
    fig = Figure(figsize=(size + 1.2, size))
    ax = fig.add_subplot()
    finite = M[np.isfinite(M)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    im = ax.imshow(M, cmap="viridis" if higher_is_more_similar else "viridis_r",
                   vmin=vmin, vmax=vmax, interpolation="nearest", gid="similarity")
    small = len(ids) <= 40
    ax.set_xticks(range(len(ids)), names if small else [], rotation=90, fontsize=FONT_SMALL)
    ax.set_yticks(range(len(ids)), names if small else [], fontsize=FONT_SMALL)
    if groups:
        labels = [groups.get(n, "?") for n in names]
        cuts = [k for k in range(1, len(labels)) if labels[k] != labels[k - 1]]
        for c in cuts:
            ax.axhline(c - 0.5, color="white", linewidth=1.2)
            ax.axvline(c - 0.5, color="white", linewidth=1.2)
    if len(ids) <= annotate_max:
        mid = (vmin + vmax) / 2
        for i in range(len(ids)):
            for j in range(len(ids)):
                if np.isfinite(M[i, j]):
                    dark = (M[i, j] < mid) == higher_is_more_similar
                    ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=FONT_CELL,
                            color="white" if dark else "black")
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    cb.set_label("similarity" + ("" if higher_is_more_similar else " (lower = more similar)"),
                 fontsize=FONT_NOTE)
    cb.ax.tick_params(labelsize=FONT_SMALL)
    if title:
        ax.set_title(title, fontsize=FONT_TITLE)
    fig.tight_layout()
    return fig


def pair_points(values: np.ndarray, model_ids: Sequence[str],
                accuracy: Mapping[str, float]) -> list[tuple[str, str, float, float]]:
    """(model a, model b, similarity, |accuracy a − accuracy b|) of every model pair with a
    finite similarity whose two models both have a probe accuracy."""
    ids = list(model_ids)
    V = np.asarray(values, dtype=np.float64)
    out = []
    for i, j in combinations(range(len(ids)), 2):
        a, b = ids[i], ids[j]
        if accuracy.get(a) is None or accuracy.get(b) is None or not np.isfinite(V[i, j]):
            continue
        out.append((a, b, float(V[i, j]), abs(float(accuracy[a]) - float(accuracy[b]))))
    return out


def similarity_vs_performance_figure(values: np.ndarray, model_ids: Sequence[str],
                                     accuracy: Mapping[str, float], *, measure: str,
                                     dataset: str, higher_is_more_similar: bool = True,
                                     groups: Mapping[str, str] | None = None,
                                     correlations: Mapping[str, float] | None = None
                                     ) -> Figure:
    """Every model pair of one dataset: similarity (x) against the gap of the two models'
    linear-probe top-1 accuracies (y). ``correlations`` (e.g. ``{"spearman": r,
    "pearson": r}``) are written in the title; ``groups`` colours a pair by its models'
    categories (same category / different)."""
    pts = pair_points(values, model_ids, accuracy)
    if len(pts) < 2:
        raise RDXInputError(f"{dataset}: {len(pts)} model pair(s) with a similarity and both "
                            "probe accuracies; the plot needs at least 2 (run rdx probe on "
                            "these models first).")
    fig = Figure(figsize=(5.6, 4.4))
    ax = fig.add_subplot()
    x = np.array([p[2] for p in pts])
    y = np.array([p[3] for p in pts])
    if groups:
        kinds = ["same " + groups.get(a, "?") if groups.get(a) == groups.get(b) else "mixed"
                 for a, b, _, _ in pts]
        uniq = sorted(set(kinds), key=lambda k: (k == "mixed", k))
        pal = class_colors(len(uniq))
        for k, kind in enumerate(uniq):
            m = np.array([kk == kind for kk in kinds])
            ax.scatter(x[m], y[m], s=22, color=pal[k], label=kind, edgecolors="black",
                       linewidths=0.3, gid=f"pairs:{kind}")
        ax.legend(fontsize=FONT_SMALL, title="model pair", title_fontsize=FONT_SMALL)
    else:
        ax.scatter(x, y, s=22, color="0.25", gid="pairs")
    if len(pts) >= 3 and np.ptp(x) > 0:
        k, c = np.polyfit(x, y, 1)
        xs = np.linspace(x.min(), x.max(), 2)
        ax.plot(xs, k * xs + c, color="0.4", lw=1, ls="--", gid="fit")
    ax.set_xlabel(f"{measure} similarity of the pair"
                  + ("" if higher_is_more_similar else " (lower = more similar)"),
                  fontsize=FONT_LABEL)
    ax.set_ylabel("|probe accuracy A − probe accuracy B| (top-1)", fontsize=FONT_LABEL)
    corr = ", ".join(f"{k} r = {v:.2f}" for k, v in (correlations or {}).items()
                     if v is not None and np.isfinite(v))
    ax.set_title(f"{dataset}: similarity vs performance gap ({len(pts)} pairs)"
                 + (f"\n{corr}" if corr else ""), fontsize=FONT_TITLE)
    ax.grid(alpha=0.25)
    fig.tight_layout()
    return fig


__all__ = ["order_models", "pair_points", "similarity_heatmap_figure",
           "similarity_vs_performance_figure"]
