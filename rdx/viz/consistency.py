"""Figures of ``rdx consistency``: how consistent model-similarity matrices are across
datasets. Each function takes the numbers and returns a matplotlib ``Figure`` built with the
object API (no pyplot state; the caller saves it, e.g. with
:func:`rdx.viz.save.save_figure`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .similarity import order_models
from .style import FONT_LABEL, FONT_NOTE, FONT_SMALL, FONT_TINY, FONT_TITLE


def consistency_boxplot_figure(per_set: Sequence[tuple[str, Sequence[float]]],
                               all_values: Sequence[float], method: str,
                               title: str) -> Figure | None:
    """One horizontal box per pair set (sorted by median) of the consistency r_P(D, D')
    over dataset pairs, its points jittered (seeded), and the IQR of all pairs shaded.
    None when no set has a finite value."""
    items = [(n, [v for v in vals if np.isfinite(v)]) for n, vals in per_set]
    items = [(n, v) for n, v in items if v]
    if not items:
        return None
    items.sort(key=lambda t: np.median(t[1]))
    fig = Figure(figsize=(8, 0.45 * len(items) + 1.5))
    ax = fig.add_subplot()
    good = [v for v in all_values if np.isfinite(v)]
    if good:
        q1, q3 = np.percentile(good, [25, 75])
        ax.axvspan(q1, q3, color="0.85", zorder=0, label="all pairs, IQR")
    # "orientation" replaced "vert" in Matplotlib 3.10
    horiz = {"orientation": "horizontal"} if tuple(
        int(x) for x in matplotlib.__version__.split(".")[:2]) >= (3, 10) else {"vert": False}
    ax.boxplot([v for _, v in items], tick_labels=[n for n, _ in items], showfliers=True,
               widths=0.6, **horiz)
    for k, (_, v) in enumerate(items, start=1):
        jitter = np.random.default_rng(k).uniform(-0.15, 0.15, len(v))
        ax.scatter(v, np.full(len(v), k) + jitter, s=8, alpha=0.5, color="C0", zorder=3)
    ax.set_xlabel(f"consistency r_P(D, D') ({method}) over dataset pairs")
    ax.set_title(title, fontsize=FONT_TITLE)
    if good:
        ax.legend(loc="lower left", fontsize=FONT_NOTE)
    fig.tight_layout()
    return fig


def aligned_matrices_figure(matrices: Mapping[str, np.ndarray], ids: Sequence[str],
                            groups: Mapping[str, str] | None, title: str,
                            higher: bool) -> Figure:
    """The model × model similarity matrix of every dataset on one colour scale, models
    grouped by category (``higher``: larger values are more similar)."""
    order = order_models(ids, groups)
    names = list(matrices)
    cols = min(4, len(names))
    rows = int(np.ceil(len(names) / cols))
    size = max(3.0, 0.25 * len(ids) + 1.5)
    fig = Figure(figsize=(size * cols, size * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    vals = np.concatenate([m[np.ix_(order, order)].ravel() for m in matrices.values()])
    vals = vals[np.isfinite(vals)]
    vmin, vmax = (float(vals.min()), float(vals.max())) if len(vals) else (0, 1)
    labels = [f"{ids[i]} ({groups.get(ids[i], '?')})" if groups else ids[i] for i in order]
    im = None
    for k, (ax, name) in enumerate(zip(axes.ravel(), names, strict=False)):
        im = ax.imshow(matrices[name][np.ix_(order, order)], vmin=vmin, vmax=vmax,
                       cmap="viridis" if higher else "viridis_r")
        ax.set_title(name, fontsize=FONT_LABEL)
        ax.set_xticks(range(len(ids)))
        ax.set_yticks(range(len(ids)))
        small = len(ids) <= 30
        ax.set_xticklabels(labels if small else [], rotation=90, fontsize=FONT_TINY)
        ax.set_yticklabels(labels if small and k % cols == 0 else [], fontsize=FONT_TINY)
    for ax in axes.ravel()[len(names):]:
        ax.axis("off")
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6)
    fig.suptitle(title, fontsize=FONT_TITLE)
    return fig


def dataset_consistency_figure(C: np.ndarray, names: Sequence[str], title: str) -> Figure:
    """The dataset × dataset consistency matrix (r in [−1, 1]; values written in the cells
    when there are at most 12 datasets)."""
    size = max(4.0, 0.35 * len(names) + 2)
    fig = Figure(figsize=(size + 1, size))
    ax = fig.add_subplot()
    im = ax.imshow(C, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(names)))
    ax.set_yticks(range(len(names)))
    ax.set_xticklabels(names, rotation=90, fontsize=FONT_SMALL)
    ax.set_yticklabels(names, fontsize=FONT_SMALL)
    if len(names) <= 12:
        for i in range(len(names)):
            for j in range(len(names)):
                if np.isfinite(C[i, j]):
                    ax.text(j, i, f"{C[i, j]:.2f}", ha="center", va="center", fontsize=FONT_SMALL,
                            color="white" if abs(C[i, j]) > 0.6 else "black")
    fig.colorbar(im, ax=ax, shrink=0.8)
    ax.set_title(title, fontsize=FONT_TITLE)
    fig.tight_layout()
    return fig


__all__ = ["aligned_matrices_figure", "consistency_boxplot_figure",
           "dataset_consistency_figure"]
