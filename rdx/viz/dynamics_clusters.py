"""The clusters of single checkpoints of a training-dynamics analysis.

* :func:`checkpoint_clusters` (paper Fig. 2): for one checkpoint, the 2-D PCA of ``C_t`` and
  of the final model, points coloured by cluster (the no-change group grey), and one
  cluster's image grid with both models' accuracy on it in the title.
* :func:`cluster_grids_figure`: the image grid of every difference cluster of one
  checkpoint, each with its size, affinity, accuracies and class make-up.
* Which checkpoints and clusters to show (:func:`choose_checkpoints`,
  :func:`choose_grids_checkpoint`, :func:`choose_cluster`) and the figures' file names.

The figures take a checkpoint's record of ``dynamics.json``, its cluster labels and
features (arrays) and the probe images (anything indexable by image number).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..errors import RDXInputError
from .grids import image_grid
from .pca_overlay import pca_coordinates
from .save import save_figure
from .style import FONT_CAPTION, FONT_NOTE, FONT_SUPTITLE, FONT_TITLE, cluster_color, darker


def choose_checkpoints(doc: dict, wanted: Any = "auto") -> list[int]:
    """Indices of the checkpoints to show in :func:`checkpoint_clusters`.

    ``auto`` (like the paper's C0, C5, C23): the first checkpoint, the first one where
    cluster 0 is a no-change cluster, the first one where the no-change group holds three
    quarters of the images and the last one that still has difference clusters (without
    repeats; the last two only while difference clusters remain). A list may hold indices
    or checkpoint names.
    """
    recs = doc["checkpoints"]
    if not recs:
        return []
    if wanted == "auto":
        picks = [0]
        if doc.get("no_change_from") is not None:
            picks.append(int(doc["no_change_from"]))
        n = int(doc["probe"]["n_images"])
        with_diff = [r for r in recs if r["n_difference_clusters"] > 0]
        mostly = [r["index"] for r in with_diff
                  if r["no_change"] and r["cluster0"]["size"] >= 0.75 * n]
        picks += mostly[:1] + [int(r["index"]) for r in with_diff[-1:]]
        return sorted(dict.fromkeys(picks))
    names = {r["checkpoint"]: r["index"] for r in recs}
    out = []
    for w in wanted:
        if isinstance(w, int) and 0 <= w < len(recs):
            out.append(w)
        elif isinstance(w, str) and w in names:
            out.append(names[w])
        else:
            raise RDXInputError(f"figures.checkpoints: {w!r} is neither an index 0..{len(recs) - 1}"
                                f" nor a checkpoint name ({', '.join(list(names)[:5])}, …).")
    return out


def cluster_figure_name(rec: dict, fmt: str = "png") -> str:
    """File name of a checkpoint's cluster figure in ``figures/``."""
    return f"clusters_C{rec['index']}_{rec['checkpoint']}.{fmt}"


def choose_cluster(rec: dict, how: str = "largest") -> dict | None:
    """The difference cluster to show: ``largest``, ``strongest`` (highest mean affinity)
    or ``lowest_accuracy`` (of C_t); cluster 0 when there is no difference cluster."""
    clusters = rec["clusters"]
    if not clusters:
        return None
    if how == "strongest":
        return clusters[-1]
    if how == "lowest_accuracy":
        return min(clusters, key=lambda c: (c["accuracy"], -c["size"]))
    return max(clusters, key=lambda c: (c["size"], c["mean_affinity"]))


def checkpoint_clusters_figure(rec: dict, labels: np.ndarray, features_t: np.ndarray,
                               features_final: np.ndarray, images: Any, *,
                               class_names: Sequence[str], cluster: str = "largest") -> Figure:
    """The figure of :func:`checkpoint_clusters`; ``images[i]`` is probe image ``i``."""
    labels = np.asarray(labels)
    n = len(labels)
    no_change = bool(rec["no_change"])
    shown = choose_cluster(rec, cluster)
    fig = Figure(figsize=(10.5, 8.6))
    gs = fig.add_gridspec(2, 2, height_ratios=[1.0, 0.95])
    alpha = float(np.clip(0.25 * np.sqrt(1000 / max(n, 1)), 0.2, 0.7))
    order = np.argsort(labels != 0, kind="stable")     # no-change group drawn first
    colors = np.array([cluster_color(int(v), no_change) for v in labels])
    name = f"C{rec['index']}"
    for col, (who, X) in enumerate(((name, features_t), ("final model (CF)", features_final))):
        ax = fig.add_subplot(gs[0, col])
        xy, var = pca_coordinates(X)
        ax.scatter(xy[order, 0], xy[order, 1], c=colors[order], s=7 if n > 1000 else 14,
                   alpha=alpha, linewidths=0, rasterized=True, gid=f"points:{col}")
        if shown is not None:
            m = labels == shown["label"]
            ax.scatter(xy[m, 0], xy[m, 1], color=cluster_color(shown["label"], no_change),
                       s=26, edgecolors="black", linewidths=0.6, zorder=3,
                       gid=f"shown_cluster:{col}")
        ax.set_title(f"{who} — PCA", fontsize=FONT_TITLE)
        ax.set_xlabel(f"PC1 ({100 * var[0]:.0f}%)", fontsize=FONT_NOTE)
        ax.set_ylabel(f"PC2 ({100 * var[1]:.0f}%)", fontsize=FONT_NOTE)
        ax.set_xticks([])
        ax.set_yticks([])
    present = [0] + [c["label"] for c in rec["clusters"]]
    handles = [Line2D([], [], marker="o", ls="", color=cluster_color(c, no_change),
                      markersize=6,
                      label=("no-change" if no_change else "cluster 0") if c == 0 else f"{c}")
               for c in present]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 10), fontsize=FONT_NOTE,
               bbox_to_anchor=(0.5, 0.955), title="cluster (colour of the points)",
               title_fontsize=FONT_NOTE, frameon=False)
    ax = fig.add_subplot(gs[1, :])
    ax.axis("off")
    if shown is None:
        ax.text(0.5, 0.5, f"{name}: every probe image is in the no-change group "
                "(no difference cluster).", ha="center", va="center", fontsize=FONT_SUPTITLE)
    else:
        grid = image_grid(images, shown["grid"], ncols=min(len(shown["grid"]), 9), cell=80)
        ax.imshow(np.asarray(grid), interpolation="nearest")
        counts = ", ".join(f"{class_names[i]} {c}" for i, c in
                           enumerate(shown["class_counts"]) if c)
        ax.set_title(f"{name} vs CF, cluster {shown['label']} (n={shown['size']}, mean affinity "
                     f"{shown['mean_affinity']:.2f}): accuracy {name} "
                     f"{shown['accuracy']:.3f}, CF {shown['accuracy_final']:.3f}\n"
                     f"classes: {counts}", fontsize=FONT_TITLE,
                     color=darker(cluster_color(shown["label"], no_change), 0.3))
    c0 = rec["cluster0"]
    fig.suptitle(f"{name} ({rec['checkpoint']}) vs the final model: "
                 f"{'no-change group' if no_change else 'cluster 0'} n={c0['size']} "
                 f"(mean affinity {c0['mean_affinity']:.2f}), "
                 f"{rec['n_difference_clusters']} difference clusters", fontsize=FONT_SUPTITLE)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    return fig


def checkpoint_clusters(rec: dict, labels: np.ndarray, features_t: np.ndarray,
                        features_final: np.ndarray, images: Any, out_path: str | Path, *,
                        class_names: Sequence[str], cluster: str = "largest") -> Path:
    """Paper Fig. 2 panel: PCA of C_t and CF coloured by cluster, one cluster's grid."""
    return save_figure(checkpoint_clusters_figure(rec, labels, features_t, features_final,
                                                  images, class_names=class_names,
                                                  cluster=cluster), out_path)


def choose_grids_checkpoint(doc: dict, wanted: Any = "auto") -> int:
    """The checkpoint whose clusters' grids are drawn: an index or a checkpoint name, or
    ``auto``: where cluster 0 becomes the no-change group (else the first checkpoint with
    difference clusters, else the first)."""
    recs = doc["checkpoints"]
    if not recs:
        raise RDXInputError("no checkpoints in the training-dynamics result.")
    if wanted == "auto":
        first = doc.get("no_change_from")
        if first is not None and recs[int(first)]["n_difference_clusters"]:
            return int(first)
        return next((int(r["index"]) for r in recs if r["n_difference_clusters"]), 0)
    names = {r["checkpoint"]: int(r["index"]) for r in recs}
    if isinstance(wanted, str) and wanted.lstrip("C").isdigit() and wanted not in names:
        wanted = int(wanted.lstrip("C"))
    if isinstance(wanted, int) and 0 <= wanted < len(recs):
        return wanted
    if isinstance(wanted, str) and wanted in names:
        return names[wanted]
    raise RDXInputError(f"figures.grids_at: {wanted!r} is neither a checkpoint index "
                        f"0..{len(recs) - 1} (or C0..C{len(recs) - 1}) nor a checkpoint name "
                        f"({', '.join(list(names)[:5])}, …).")


def _makeup(counts: Sequence[int], class_names: Sequence[str]) -> str:
    pairs = sorted(((c, n) for n, c in zip(class_names, counts) if c), reverse=True)
    return ", ".join(f"{n} {c}" for c, n in pairs)


def cluster_grids_figure(rec: dict, images: Any, *, class_names: Sequence[str],
                         classes: np.ndarray | None = None, columns: int = 4) -> Figure:
    """The image grid of every difference cluster of one checkpoint (``rec``, a record of
    ``dynamics.json``), each titled with its label and track, size, mean affinity, the
    accuracy of ``C_t`` and of the final model, and its class make-up — of the whole cluster
    and, with ``classes`` (class per probe image), of the grid's images. ``images[i]``
    gives probe image ``i``."""
    clusters = rec["clusters"]
    name = f"C{rec['index']}"
    if not clusters:
        fig = Figure(figsize=(8.0, 1.6))
        fig.text(0.5, 0.5, f"{name} ({rec['checkpoint']}): every probe image is in the "
                 "no-change group (no difference cluster).", ha="center", va="center")
        return fig
    ncol = min(columns, len(clusters))
    nrow = -(-len(clusters) // ncol)
    fig = Figure(figsize=(3.3 * ncol, 3.9 * nrow + 0.7))
    for k, c in enumerate(clusters):
        ax = fig.add_subplot(nrow, ncol, k + 1)
        ax.imshow(np.asarray(image_grid(images, c["grid"], cell=64)), interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        color = cluster_color(int(c["label"]), bool(rec["no_change"]))
        for sp in ax.spines.values():
            sp.set_edgecolor(color)
            sp.set_linewidth(2.5)
        lines = [f"cluster {c['label']}" + (f" · track {c['track']}" if "track" in c else "")
                 + f" · n={c['size']} · aff={c['mean_affinity']:.2f}",
                 f"accuracy {name} {c['accuracy']:.2f}, CF {c['accuracy_final']:.2f}",
                 f"whole cluster ({c['size']}): {_makeup(c['class_counts'], class_names)}"]
        if classes is not None:
            shown = np.bincount(np.asarray(classes)[c["grid"]], minlength=len(class_names))
            lines.append(f"shown ({len(c['grid'])}): {_makeup(shown, class_names)}")
        ax.set_title("\n".join(lines), fontsize=FONT_CAPTION, color=darker(color, 0.3), loc="left")
    c0 = rec["cluster0"]
    fig.suptitle(f"{name} ({rec['checkpoint']}) vs the final model: the grid of every "
                 f"difference cluster ({'no-change group' if rec['no_change'] else 'cluster 0'}"
                 f" n={c0['size']}, mean affinity {c0['mean_affinity']:.2f}, not shown)",
                 fontsize=FONT_TITLE)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def grids_figure_name(rec: dict, fmt: str = "png") -> str:
    """File name of a checkpoint's all-cluster grids figure in ``figures/``."""
    return f"grids_C{rec['index']}_{rec['checkpoint']}.{fmt}"


__all__ = ["checkpoint_clusters", "checkpoint_clusters_figure", "choose_checkpoints",
           "choose_cluster", "choose_grids_checkpoint", "cluster_figure_name",
           "cluster_grids_figure", "grids_figure_name"]
