"""Paper Fig. 1 of the training-dynamics analysis (:mod:`rdx.studies.dynamics`): mean
affinity, cluster size and cluster accuracy against the checkpoint — cluster 0 (the
no-change group) against the band of clusters 1–9 (their mean as a line, min–max shaded),
with the checkpoint where cluster 0 becomes a no-change cluster marked.

The figures take ``dynamics.json`` as a dict (read it with
:func:`rdx.results.store.load_dynamics`).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..errors import RDXInputError
from .save import save_figure
from .style import (CLUSTER0_COLOR, FONT_LABEL, FONT_NOTE, FONT_SMALL, FONT_SUPTITLE, FONT_TITLE,
                    NO_CHANGE_GREY, darker, method_color)


def _series(records: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                          np.ndarray]:
    """(cluster 0 value, band mean, band min, band max) per checkpoint; NaN when missing."""
    def val(d: Any) -> float:
        return np.nan if d is None else float(d)

    c0 = np.array([val(r["cluster0"].get(key)) for r in records])
    bands = [r["band"].get(key) or {} for r in records]
    return (c0, *(np.array([val(b.get(s)) for b in bands]) for s in ("mean", "min", "max")))


def checkpoint_ticks(records: Sequence[dict], max_ticks: int = 12
                     ) -> tuple[list[int], list[str]]:
    """Positions and labels (``C<i>`` and the epochs trained) of at most about
    ``max_ticks`` checkpoint ticks, the last checkpoint always among them."""
    n = len(records)
    step = max(1, int(np.ceil(n / max_ticks)))
    idx = list(range(0, n, step))
    if idx[-1] != n - 1:
        if n - 1 - idx[-1] < max(2, step) and len(idx) > 1:
            idx[-1] = n - 1          # too close to the previous tick: move it to the end
        else:
            idx.append(n - 1)
    labels = []
    for i in idx:
        ep = records[i].get("epochs_completed")
        labels.append(f"C{i}" + ("" if ep is None else f"\n{ep:.3g} ep"))
    return idx, labels


def dynamics_curves_figure(doc: dict) -> Figure:
    """The figure of :func:`dynamics_curves` (``doc``: ``dynamics.json``)."""
    recs = doc["checkpoints"]
    if not recs:
        raise RDXInputError("no checkpoints in the training-dynamics result; nothing to plot.")
    x = np.arange(len(recs))
    threshold = float(doc["rdx"].get("null_threshold", 1.5))
    no_change = np.array([bool(r["no_change"]) for r in recs])
    first = doc.get("no_change_from")
    band_color = method_color("rdx")
    fig = Figure(figsize=(15.5, 4.4))
    axes = fig.subplots(1, 3)
    panels = (("mean_affinity", "mean affinity", axes[0]), ("size", "cluster size", axes[1]),
              ("accuracy", "cluster accuracy", axes[2]))
    for key, label, ax in panels:
        c0, bm, blo, bhi = _series(recs, key)
        ax.fill_between(x, blo, bhi, color=band_color, alpha=0.18, linewidth=0,
                        gid=f"band:{key}")
        ax.plot(x, bm, color=band_color, lw=1.8, label="clusters 1–9 (mean; min–max shaded)",
                gid=f"band_mean:{key}")
        ax.plot(x, c0, color=CLUSTER0_COLOR, lw=1.8, label="cluster 0", gid=f"cluster0:{key}")
        ax.scatter(x[~no_change], c0[~no_change], color=CLUSTER0_COLOR, s=22, zorder=3)
        ax.scatter(x[no_change], c0[no_change], color=NO_CHANGE_GREY, edgecolors="black",
                   linewidths=0.6, s=26, zorder=3, gid=f"no_change_points:{key}")
        if key == "accuracy":
            c0f, bmf, _lo, _hi = _series(recs, "accuracy_final")
            ax.plot(x, c0f, color=CLUSTER0_COLOR, lw=1.2, ls="--",
                    label="cluster 0, final model")
            ax.plot(x, bmf, color=darker(band_color), lw=1.2, ls="--",
                    label="clusters 1–9, final model")
            ax.set_ylim(-0.02, 1.02)
        if key == "mean_affinity":
            ax.axhline(threshold, color="black", lw=0.8, ls=":",
                       label=f"no-change threshold {threshold:g}")
            ax.set_yscale("log")
        if first is not None:
            ax.axvline(first, color="0.35", lw=1.0, ls="--", gid="no_change_from")
            ax.annotate(f"C{first}: cluster 0 → no-change", xy=(first, 1.0),
                        xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize=FONT_NOTE, color="0.25")
        idx, labels = checkpoint_ticks(recs)
        ax.set_xticks(idx)
        ax.set_xticklabels(labels, fontsize=FONT_SMALL)
        ax.set_xlabel("checkpoint (epochs trained)", fontsize=FONT_LABEL)
        ax.set_ylabel(label, fontsize=FONT_LABEL)
        ax.set_title(label + (" (C_t solid, final model dashed)" if key == "accuracy" else ""),
                     fontsize=FONT_TITLE)
        ax.grid(alpha=0.25)
    handles = [Line2D([], [], color=CLUSTER0_COLOR, lw=1.8, marker="o", markersize=4,
                      label="cluster 0 (lowest affinity; difference cluster)"),
               Line2D([], [], color=NO_CHANGE_GREY, marker="o", markeredgecolor="black",
                      lw=0, label="cluster 0 is a no-change cluster (grey points)"),
               Patch(facecolor=band_color, alpha=0.35,
                     label="clusters 1–9: mean line, min–max shaded"),
               Line2D([], [], color="0.3", ls="--", lw=1.2, label="final model's accuracy"),
               Line2D([], [], color="black", ls=":", lw=0.8,
                      label=f"threshold {threshold:g}")]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=FONT_NOTE,
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"{doc.get('name', '')}: every checkpoint C_t vs the final model "
                 f"({doc['probe']['n_images']} probe images; clusters close in the final "
                 "model, spread in C_t)", fontsize=FONT_SUPTITLE)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    return fig


def dynamics_curves(doc: dict, out_path: str | Path) -> Path:
    """Paper Fig. 1: mean affinity, cluster size and cluster accuracy vs checkpoint."""
    return save_figure(dynamics_curves_figure(doc), out_path)


__all__ = ["checkpoint_ticks", "dynamics_curves", "dynamics_curves_figure"]
