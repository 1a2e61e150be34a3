"""Figures of the training-dynamics analysis (:mod:`rdx.studies.dynamics`), like the workshop paper's.

* :func:`dynamics_curves` (paper Fig. 1): mean affinity, cluster size and cluster accuracy
  against the checkpoint — cluster 0 (the no-change group) against the band of clusters
  1–9 (their mean as a line, min–max shaded), with the checkpoint where cluster 0 becomes a
  no-change cluster marked.
* :func:`checkpoint_clusters` (paper Fig. 2): for one checkpoint, the 2-D PCA of ``C_t`` and
  of the final model, points coloured by cluster (the no-change group grey), and one
  cluster's image grid with both models' accuracy on it in the title.
* :func:`cluster_makeup_figure`: the class make-up of every cluster at every checkpoint in
  one figure — one row per cluster *track* (the same cluster followed across checkpoints,
  :func:`rdx.studies.dynamics.cluster_tracks`), stacked bars of its class counts.
* :func:`cluster_grids_figure`: the image grid of every difference cluster of one
  checkpoint, each with its size, affinity, accuracies and class make-up.

matplotlib's object API on an Agg canvas (headless), atomic writes; helpers, palette and
PCA come from :mod:`rdx.viz.analysis`.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib import colors as mcolors
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..errors import RDXInputError
from .analysis import class_colors, darker, method_color, pca_coordinates, save_figure
from .grids import image_grid

#: Colour of the no-change group, and of cluster 0 while it is still a difference cluster.
NO_CHANGE_GREY = (0.72, 0.72, 0.72)
CLUSTER0_COLOR = mcolors.to_rgb("#0072B2")
#: Difference clusters 1, 2, …: tab10 without its blue (cluster 0) and grey (no-change).
_CLUSTER_PALETTE = [mcolors.to_rgb(colormaps["tab10"](i)) for i in (1, 2, 3, 4, 5, 6, 8, 9)] \
    + [(0.0, 0.0, 0.0)]


def cluster_color(label: int, no_change: bool) -> tuple[float, float, float]:
    """Colour of cluster ``label`` of a checkpoint (0 = grey when it is a no-change group)."""
    if label == 0:
        return NO_CHANGE_GREY if no_change else CLUSTER0_COLOR
    return _CLUSTER_PALETTE[(label - 1) % len(_CLUSTER_PALETTE)]


def _series(records: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                          np.ndarray]:
    """(cluster 0 value, band mean, band min, band max) per checkpoint; NaN when missing."""
    def val(d: Any) -> float:
        return np.nan if d is None else float(d)

    c0 = np.array([val(r["cluster0"].get(key)) for r in records])
    bands = [r["band"].get(key) or {} for r in records]
    return (c0, *(np.array([val(b.get(s)) for b in bands]) for s in ("mean", "min", "max")))


def _tick_labels(records: Sequence[dict], max_ticks: int = 12) -> tuple[list[int], list[str]]:
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
                        textcoords="offset points", fontsize=8, color="0.25")
        idx, labels = _tick_labels(recs)
        ax.set_xticks(idx)
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_xlabel("checkpoint (epochs trained)", fontsize=9)
        ax.set_ylabel(label, fontsize=9)
        ax.set_title(label + (" (C_t solid, final model dashed)" if key == "accuracy" else ""),
                     fontsize=10)
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
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=8,
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"{doc.get('name', '')}: every checkpoint C_t vs the final model "
                 f"({doc['probe']['n_images']} probe images; clusters close in the final "
                 "model, spread in C_t)", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    return fig


def dynamics_curves(doc: dict, out_path: str | Path) -> Path:
    """Paper Fig. 1: mean affinity, cluster size and cluster accuracy vs checkpoint."""
    return save_figure(dynamics_curves_figure(doc), out_path)


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
    """The figure of :func:`checkpoint_clusters`; ``images(indices)`` gives raw images."""
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
        ax.set_title(f"{who} — PCA", fontsize=10)
        ax.set_xlabel(f"PC1 ({100 * var[0]:.0f}%)", fontsize=8)
        ax.set_ylabel(f"PC2 ({100 * var[1]:.0f}%)", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    present = [0] + [c["label"] for c in rec["clusters"]]
    handles = [Line2D([], [], marker="o", ls="", color=cluster_color(c, no_change),
                      markersize=6,
                      label=("no-change" if no_change else "cluster 0") if c == 0 else f"{c}")
               for c in present]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 10), fontsize=8,
               bbox_to_anchor=(0.5, 0.955), title="cluster (colour of the points)",
               title_fontsize=8, frameon=False)
    ax = fig.add_subplot(gs[1, :])
    ax.axis("off")
    if shown is None:
        ax.text(0.5, 0.5, f"{name}: every probe image is in the no-change group "
                "(no difference cluster).", ha="center", va="center", fontsize=11)
    else:
        grid = image_grid(images, shown["grid"], ncols=min(len(shown["grid"]), 9), cell=80)
        ax.imshow(np.asarray(grid), interpolation="nearest")
        counts = ", ".join(f"{class_names[i]} {c}" for i, c in
                           enumerate(shown["class_counts"]) if c)
        ax.set_title(f"{name} vs CF, cluster {shown['label']} (n={shown['size']}, mean affinity "
                     f"{shown['mean_affinity']:.2f}): accuracy {name} "
                     f"{shown['accuracy']:.3f}, CF {shown['accuracy_final']:.3f}\n"
                     f"classes: {counts}", fontsize=10,
                     color=darker(cluster_color(shown["label"], no_change), 0.3))
    c0 = rec["cluster0"]
    fig.suptitle(f"{name} ({rec['checkpoint']}) vs the final model: "
                 f"{'no-change group' if no_change else 'cluster 0'} n={c0['size']} "
                 f"(mean affinity {c0['mean_affinity']:.2f}), "
                 f"{rec['n_difference_clusters']} difference clusters", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    return fig


def checkpoint_clusters(rec: dict, labels: np.ndarray, features_t: np.ndarray,
                        features_final: np.ndarray, images: Any, out_path: str | Path, *,
                        class_names: Sequence[str], cluster: str = "largest") -> Path:
    """Paper Fig. 2 panel: PCA of C_t and CF coloured by cluster, one cluster's grid."""
    return save_figure(checkpoint_clusters_figure(rec, labels, features_t, features_final, images,
                                            class_names=class_names, cluster=cluster), out_path)


def cluster_tracks_of(doc: dict) -> dict[int, dict[int, dict]]:
    """``{track: {checkpoint index: cluster record}}`` of a ``dynamics.json`` whose clusters
    carry a ``track`` (cluster 0, the no-change group, is track 0)."""
    out: dict[int, dict[int, dict]] = {}
    for r in doc["checkpoints"]:
        for c in [r["cluster0"], *r["clusters"]]:
            t = c.get("track", 0 if c["label"] == 0 else None)
            if t is not None:
                out.setdefault(int(t), {})[int(r["index"])] = c
    return out


def _ordered_tracks(tracks: dict[int, dict[int, dict]]) -> list[int]:
    """Track 0 first, then the longest-lived tracks (ties: the earliest, then the largest)."""
    rest = sorted((t for t in tracks if t != 0),
                  key=lambda t: (-len(tracks[t]), min(tracks[t]),
                                 -max(c["size"] for c in tracks[t].values())))
    return ([0] if 0 in tracks else []) + rest


def cluster_makeup_figure(doc: dict, *, max_tracks: int = 12) -> Figure:
    """The class make-up of every cluster across all checkpoints: one row per track (the
    no-change group first, then the longest-lived difference clusters, at most
    ``max_tracks`` rows), one stacked bar per checkpoint (its images per class; the number
    above a bar is the cluster's label at that checkpoint). Bars carry the gid
    ``makeup:<track>:<checkpoint index>:<class>``."""
    recs = doc["checkpoints"]
    if not recs:
        raise RDXInputError("no checkpoints in the training-dynamics result; nothing to plot.")
    names = list(doc["probe"]["class_names"])
    tracks = cluster_tracks_of(doc)
    order = _ordered_tracks(tracks)
    shown, hidden = order[:max_tracks], order[max_tracks:]
    colors = class_colors(len(names))
    x = np.arange(len(recs))
    fig = Figure(figsize=(max(8.0, 0.42 * len(recs) + 3.0), 1.45 * len(shown) + 1.6))
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    for ax, t in zip(axes, shown):
        per = tracks[t]
        bottom = np.zeros(len(recs))
        for k, name in enumerate(names):
            h = np.array([per[i]["class_counts"][k] if i in per else 0 for i in x], float)
            ax.bar(x, h, bottom=bottom, color=colors[k], width=0.8, linewidth=0,
                   gid=f"makeup:{t}:{k}", label=name)
            bottom += h
        if t == 0:   # grey rim where cluster 0 is a no-change cluster
            nc = [i for i in x if recs[i]["no_change"]]
            ax.bar(nc, bottom[nc], width=0.8, fill=False, edgecolor="0.35", linewidth=1.0,
                   gid="makeup:no_change")
        elif len(recs) <= 40:
            for i, c in per.items():
                ax.text(i, bottom[i], str(c["label"]), ha="center", va="bottom", fontsize=6,
                        color="0.3")
        ax.set_ylim(0, max(bottom.max(), 1) * 1.18)
        ax.set_ylabel("cluster 0 /\nno-change\n(track 0)" if t == 0 else f"track {t}",
                      fontsize=8,
                      rotation=0, ha="right", va="center")
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", alpha=0.25)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    idx, labels = _tick_labels(recs)
    axes[-1].set_xticks(idx)
    axes[-1].set_xticklabels(labels, fontsize=7)
    axes[-1].set_xlabel("checkpoint (epochs trained)", fontsize=9)
    handles = [Patch(facecolor=colors[k], label=n) for k, n in enumerate(names)]
    handles.append(Patch(facecolor="white", edgecolor="0.35",
                         label="cluster 0 is a no-change cluster"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8,
               title="class (bar height: images of the cluster)", title_fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    more = (f"; {len(hidden)} shorter-lived tracks not shown (clusters.csv lists them)"
            if hidden else "")
    fig.suptitle(f"{doc.get('name', '')}: class make-up of every cluster at every checkpoint "
                 f"(rows: one cluster followed across checkpoints by member overlap{more})",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.8 / fig.get_figheight(), 1, 1 - 0.5 / fig.get_figheight()))
    return fig


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
        ax.set_title("\n".join(lines), fontsize=7.5, color=darker(color, 0.3), loc="left")
    c0 = rec["cluster0"]
    fig.suptitle(f"{name} ({rec['checkpoint']}) vs the final model: the grid of every "
                 f"difference cluster ({'no-change group' if rec['no_change'] else 'cluster 0'}"
                 f" n={c0['size']}, mean affinity {c0['mean_affinity']:.2f}, not shown)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def grids_figure_name(rec: dict, fmt: str = "png") -> str:
    """File name of a checkpoint's all-cluster grids figure in ``figures/``."""
    return f"grids_C{rec['index']}_{rec['checkpoint']}.{fmt}"


def write_dynamics_figures(out_dir: str | Path, doc: dict | None = None, *,
                           images: Any = None) -> dict[str, list[Path]]:
    """Every figure of a finished run into ``<out_dir>/figures``: the curves and one
    cluster figure per chosen checkpoint (config ``figures``). ``images``: a callable
    ``indices → raw images`` of the probe set (rebuilt from the config when None)."""
    from ..results.store import load_dynamics, load_features, load_labels

    out = Path(out_dir)
    doc = load_dynamics(out) if doc is None else doc
    cfg = doc["config"]
    figs = cfg.get("figures") or {}
    formats = figs.get("formats") or ["png"]
    fig_dir = out / "figures"
    written: dict[str, list[Path]] = {"curves": [], "checkpoints": [], "makeup": [],
                                      "grids": []}
    fig = dynamics_curves_figure(doc)
    for fmt in formats:
        written["curves"].append(save_figure(fig, fig_dir / f"dynamics_curves.{fmt}"))
    if any("track" in c for r in doc["checkpoints"] for c in r["clusters"]) or \
            all(not r["clusters"] for r in doc["checkpoints"]):
        fig = cluster_makeup_figure(doc, max_tracks=int(figs.get("max_tracks", 12)))
        for fmt in formats:
            written["makeup"].append(save_figure(fig, fig_dir / f"cluster_makeup.{fmt}"))
    if images is None:
        from ..data.selection import select_images

        ds, idx = select_images(cfg["probe"])
        if np.asarray(idx).tolist() != doc["probe"]["indices"]:
            raise RDXInputError("the probe selection no longer gives the analysed images; "
                                "re-run the analysis.")
        images = lambda which: ds.image_array(np.asarray(idx)[np.asarray(which)])
    final = load_features(out, "final")
    for i in choose_checkpoints(doc, figs.get("checkpoints", "auto")):
        rec = doc["checkpoints"][i]
        fig = checkpoint_clusters_figure(
            rec, load_labels(out, rec["checkpoint"]), load_features(out, rec["checkpoint"]),
            final, _Images(images), class_names=doc["probe"]["class_names"],
            cluster=figs.get("cluster", "largest"))
        for fmt in formats:
            written["checkpoints"].append(
                save_figure(fig, fig_dir / cluster_figure_name(rec, fmt)))
    rec = doc["checkpoints"][choose_grids_checkpoint(doc, figs.get("grids_at", "auto"))]
    fig = cluster_grids_figure(rec, _Images(images), class_names=doc["probe"]["class_names"],
                               classes=doc["probe"].get("classes"))
    for fmt in formats:
        written["grids"].append(save_figure(fig, fig_dir / grids_figure_name(rec, fmt)))
    return written


class _Images:
    """``images[i]`` for :func:`rdx.viz.grids.image_grid` from a batch loader."""

    def __init__(self, load: Any) -> None:
        self.load = load

    def __getitem__(self, i: int) -> np.ndarray:
        return self.load([int(i)])[0]


__all__ = [
    "choose_grids_checkpoint",
    "cluster_grids_figure",
    "cluster_makeup_figure",
    "cluster_tracks_of",
    "grids_figure_name",
    "checkpoint_clusters",
    "checkpoint_clusters_figure",
    "choose_checkpoints",
    "choose_cluster",
    "cluster_color",
    "cluster_figure_name",
    "dynamics_curves",
    "dynamics_curves_figure",
    "write_dynamics_figures",
]
