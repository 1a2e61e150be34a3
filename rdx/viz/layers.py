"""Figures of the layer-wise study (``layers.json`` of :mod:`rdx.studies.layers`).

* ``probe_accuracy.png``: k-NN and linear probe accuracy by layer.
* ``cluster_change_pvalues.png`` / ``cluster_homogeneity_pvalues.png``: per layer pair
  (rows) and RDX cluster (columns; 1 = weakest difference), the permutation p-value of the
  cluster's prediction-change rate / majority-class fraction, one panel per direction;
  ``−log10 p`` colour, ``*`` where ``p < alpha``, grey where the pair has no such cluster.
* ``cluster_change_rate.png``: per layer pair, the change rate over all images, the
  size-weighted rate of the difference clusters and the permutation null (mean ± 1 sd).
* ``fraction_significant.png``: per layer pair and direction, the fraction of difference
  clusters enriched for prediction changes and for one class.
* ``patching_<metric>.png``: block × head heatmaps of every per-head patching metric
  (accuracy changes and the signed cluster delta on a blue–red scale centred on 0).

matplotlib's object API on an Agg canvas (no display needed), written atomically
(:func:`rdx.viz.save.save_png`).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from ..errors import RDXInputError
from ..results.types import DIRECTIONS
from .save import save_png
from .style import FONT_CELL, FONT_LABEL, FONT_SMALL, FONT_SUPTITLE, FONT_TITLE, MISSING_COLOR

DIRECTION_TITLE = {"a_over_b": "spread apart by the step (close before, far after)",
                   "b_over_a": "brought together by the step (far before, close after)"}
#: Title and whether the scale is signed, per patching metric.
PATCH_METRICS = {
    "topk_change": ("top-k neighbourhood change", False),
    "one_minus_cka": ("1 − CKA (patched vs unpatched)", False),
    "cluster_delta_mean": ("RDX cluster-neighbourhood delta (mean over clusters)", True),
    "cluster_delta_sum_abs": ("RDX cluster-neighbourhood delta (Σ|δ|)", False),
    "knn_acc_change": ("k-NN probe accuracy change", True),
    "linear_acc_change": ("linear probe accuracy change", True),
    "knn_flip_rate": ("k-NN prediction flip rate", False),
}


def pair_labels(doc: dict) -> list[str]:
    """``"b0.in→b0"`` per layer pair."""
    return [f"{p['a_label']}→{p['b_label']}" for p in doc["pairs"]]


def probe_accuracy_figure(doc: dict) -> Figure:
    layers = doc["layers"]
    x = np.arange(len(layers))
    fig = Figure(figsize=(max(5.0, 0.6 * len(layers) + 2), 3.4))
    ax = fig.add_subplot()
    ax.plot(x, [lay["knn_accuracy"] for lay in layers], "o-", label="k-NN probe")
    ax.plot(x, [lay["linear_accuracy"] for lay in layers], "s-", label="linear probe")
    ax.set_xticks(x, [lay["label"] for lay in layers], rotation=45, ha="right")
    ax.set_ylabel("accuracy on the analysis images")
    ax.set_title("probe accuracy by layer")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def _cluster_matrix(doc: dict, direction: str, key: str) -> np.ndarray:
    pairs = doc["pairs"]
    width = max([1] + [len(p["directions"][direction]["clusters"]) for p in pairs])
    M = np.full((len(pairs), width), np.nan)
    for i, p in enumerate(pairs):
        for j, c in enumerate(p["directions"][direction]["clusters"]):
            if c.get(key) is not None:
                M[i, j] = c[key]
    return M


def cluster_pvalue_figure(doc: dict, key: str, title: str) -> Figure:
    """Heatmaps (pairs × clusters) of the p-values ``key`` in both directions."""
    alpha = float(doc.get("significance", {}).get("alpha", 0.05))
    rows = pair_labels(doc)
    fig = Figure(figsize=(11, 0.42 * len(rows) + 1.8))
    axes = fig.subplots(1, 2, sharey=True)
    cmap = colormaps["magma_r"].with_extremes(bad=MISSING_COLOR)
    n_perm = [p["directions"][d]["n_permutations"] for p in doc["pairs"] for d in DIRECTIONS]
    vmax = float(np.log10(1 + max(n_perm or [1000])))
    im = None
    for ax, d in zip(axes, DIRECTIONS):
        P = _cluster_matrix(doc, d, key)
        L = -np.log10(P)
        im = ax.imshow(np.ma.masked_invalid(L), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
        for (i, j), p in np.ndenumerate(P):
            if np.isfinite(p) and p < alpha:
                ax.text(j, i, "*", ha="center", va="center", color="white", fontsize=FONT_SUPTITLE,
                        fontweight="bold")
        ax.set_xticks(range(P.shape[1]), [str(j + 1) for j in range(P.shape[1])])
        ax.set_xlabel("RDX cluster (1 = weakest difference)")
        ax.set_title(f"{d}\n{DIRECTION_TITLE[d]}", fontsize=FONT_LABEL)
    axes[0].set_yticks(range(len(rows)), rows)
    axes[0].set_ylabel("layer pair")
    fig.suptitle(f"{title} (−log10 p; * p < {alpha:g})")
    fig.colorbar(im, ax=list(axes), shrink=0.8, label="−log10 p")
    return fig


def change_rate_figure(doc: dict) -> Figure:
    rows = pair_labels(doc)
    x = np.arange(len(rows))
    fig = Figure(figsize=(max(6.0, 0.7 * len(rows) + 2), 3.8))
    ax = fig.add_subplot()
    overall = [p["directions"]["a_over_b"]["overall_change_rate"] for p in doc["pairs"]]
    ax.plot(x, overall, "k--", label="all images", lw=1)
    for off, d, marker in ((-0.12, "a_over_b", "v"), (0.12, "b_over_a", "^")):
        w = [p["directions"][d]["weighted_change_rate"] for p in doc["pairs"]]
        mu = [p["directions"][d]["weighted_change_rate_null"]["mean"] for p in doc["pairs"]]
        sd = [p["directions"][d]["weighted_change_rate_null"]["sd"] for p in doc["pairs"]]
        w = np.array([np.nan if v is None else v for v in w], dtype=float)
        mu = np.array([np.nan if v is None else v for v in mu], dtype=float)
        sd = np.array([np.nan if v is None else v for v in sd], dtype=float)
        line = ax.plot(x + off, w, marker, ms=7, ls="none",
                       label=f"{d} clusters (size-weighted)")[0]
        ax.errorbar(x + off, mu, yerr=sd, fmt="_", color=line.get_color(), alpha=0.5,
                    capsize=3, label=f"{d}: random sets ±1 sd")
    ax.set_xticks(x, rows, rotation=45, ha="right")
    ax.set_ylabel("prediction-change rate")
    ax.set_title("prediction changes between consecutive layers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=FONT_SMALL, ncol=2)
    return fig


def fraction_significant_figure(doc: dict) -> Figure:
    rows = pair_labels(doc)
    x = np.arange(len(rows))
    fig = Figure(figsize=(max(6.0, 0.8 * len(rows) + 2), 3.8))
    ax = fig.add_subplot()
    width = 0.2
    series = [("a_over_b", "fraction_significant_change", "a_over_b: change-enriched"),
              ("b_over_a", "fraction_significant_change", "b_over_a: change-enriched"),
              ("a_over_b", "fraction_significant_homogeneity", "a_over_b: class-enriched"),
              ("b_over_a", "fraction_significant_homogeneity", "b_over_a: class-enriched")]
    for i, (d, key, label) in enumerate(series):
        v = [p["directions"][d][key] for p in doc["pairs"]]
        v = np.array([np.nan if a is None else a for a in v], dtype=float)
        ax.bar(x + (i - 1.5) * width, v, width, label=label,
               hatch="//" if "homogeneity" in key else None)
    ax.set_xticks(x, rows, rotation=45, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction of difference clusters")
    alpha = float(doc.get("significance", {}).get("alpha", 0.05))
    ax.set_title(f"significant clusters (p < {alpha:g})")
    ax.legend(fontsize=FONT_SMALL, ncol=2)
    ax.grid(alpha=0.3, axis="y")
    return fig


def patching_figure(doc: dict, metric: str) -> Figure:
    """Block × head heatmap of one patching metric."""
    pd = doc.get("patching")
    if not pd:
        raise RDXInputError("the study has no patching results.")
    title, signed = PATCH_METRICS[metric]
    M = np.array(pd["metrics"][metric], dtype=float)
    blocks, heads = pd["blocks"], pd["heads"]
    fig = Figure(figsize=(0.55 * len(heads) + 2.6, 0.45 * len(blocks) + 1.6))
    ax = fig.add_subplot()
    cmap = colormaps["bwr" if signed else "viridis"].with_extremes(bad=MISSING_COLOR)
    finite = M[np.isfinite(M)]
    if signed:
        lim = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
        norm = TwoSlopeNorm(vcenter=0.0, vmin=-lim, vmax=lim)
        im = ax.imshow(np.ma.masked_invalid(M), cmap=cmap, norm=norm, aspect="auto")
    else:
        im = ax.imshow(np.ma.masked_invalid(M), cmap=cmap, aspect="auto")
    if M.size <= 400:
        for (i, j), v in np.ndenumerate(M):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=FONT_CELL,
                        color="black" if signed else "white")
    ax.set_xticks(range(len(heads)), [str(h) for h in heads])
    ax.set_yticks(range(len(blocks)), [f"block {b}" for b in blocks])
    ax.set_xlabel("head (mean-ablated)")
    ax.set_title(title, fontsize=FONT_TITLE)
    fig.colorbar(im, ax=ax, shrink=0.85)
    return fig


def layer_figures(doc: dict, out_dir: str | Path,
                  metrics: Sequence[str] | None = None) -> list[Path]:
    """Write every figure of a study into ``out_dir``; returns the files."""
    out = Path(out_dir)
    paths = [save_png(probe_accuracy_figure(doc), out / "probe_accuracy.png")]
    if doc.get("pairs"):
        paths.append(save_png(cluster_pvalue_figure(doc, "change_p",
                                                    "prediction-change enrichment"),
                              out / "cluster_change_pvalues.png"))
        paths.append(save_png(cluster_pvalue_figure(doc, "homogeneity_p",
                                                    "class homogeneity"),
                              out / "cluster_homogeneity_pvalues.png"))
        paths.append(save_png(change_rate_figure(doc), out / "cluster_change_rate.png"))
        paths.append(save_png(fraction_significant_figure(doc),
                              out / "fraction_significant.png"))
    if doc.get("patching"):
        for m in metrics or PATCH_METRICS:
            if m in doc["patching"]["metrics"]:
                paths.append(save_png(patching_figure(doc, m), out / f"patching_{m}.png"))
    return paths


__all__ = ["PATCH_METRICS", "change_rate_figure", "cluster_pvalue_figure",
           "fraction_significant_figure", "layer_figures", "pair_labels", "patching_figure",
           "probe_accuracy_figure"]
