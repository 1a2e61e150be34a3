"""PCA overlays: a 2-D PCA of each model with every image coloured by class and each
method's grid images of one direction overlaid (one panel pair per method, framed in the
method's colour; black markers, one shape per explanation).

The functions take a :class:`~rdx.results.comparison_view.ComparisonView` (read with
:func:`~rdx.results.comparison_view.read_comparison_view`).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..errors import RDXInputError
from ..results.comparison_view import ComparisonView
from ..results.types import DIRECTIONS
from .labels import DIRECTION_LABELS, model_names
from .methods import grid_methods
from .save import save_figure
from .style import (FONT_HEADING, FONT_LABEL, FONT_NOTE, GRID_MARKER_EDGE, GRID_MARKER_FACE,
                    MARKERS, class_colors, darker, method_color)


def pca_coordinates(X: np.ndarray, random_state: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """2-D PCA of one representation: ``(coords n×2, explained variance ratio (2,))``."""
    from sklearn.decomposition import PCA

    X = np.asarray(X, dtype=np.float64)
    k = min(2, X.shape[0], X.shape[1])
    pca = PCA(n_components=k, random_state=random_state).fit(X)
    coords = pca.transform(X)
    if k < 2:
        coords = np.hstack([coords, np.zeros((len(X), 2 - k))])
    return coords, np.pad(pca.explained_variance_ratio_, (0, 2 - k))


def mds_coordinates(D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2-D classical MDS of a distance matrix: ``(coords n×2, variance ratio (2,))``.

    For Euclidean distances of features this is their 2-D PCA (up to the signs of the
    axes): the map a comparison of precomputed distances (``rdx explain --distances``)
    draws in place of the features' PCA. The ratio is each axis' eigenvalue over the sum of
    the positive ones of the doubly centred ``−D²/2``."""
    from scipy.linalg import eigh

    D2 = np.asarray(D, dtype=np.float64) ** 2
    n = len(D2)
    G = -0.5 * (D2 - D2.mean(0, keepdims=True) - D2.mean(1, keepdims=True) + D2.mean())
    vals, vecs = eigh(G)
    order = np.argsort(vals)[::-1]
    vals, vecs = vals[order], vecs[:, order]
    top = np.maximum(vals[:2], 0.0)
    coords = vecs[:, :2] * np.sqrt(top)[None, :]
    total = float(vals[vals > 0].sum()) or 1.0
    if n < 2:
        coords = np.zeros((n, 2))
    return coords, top / total


def _is_distances(view: ComparisonView) -> bool:
    """Whether the comparison's representations are distance matrices (a method fitted
    with ``metric="precomputed"``)."""
    return any((doc.get("params") or {}).get("metric") == "precomputed"
               for doc in view.methods.values())


def pca_overlay_points(view: ComparisonView, direction: str,
                       methods: Sequence[str] | None = None) -> dict[str, Any]:
    """What :func:`pca_overlay` plots, without drawing.

    Returns
    -------
    dict
        ``coords`` ``{"a": n×2, "b": n×2}`` (PCA of each model, fitted separately),
        ``variance`` (explained-variance ratios), ``labels`` (n,) or None, and ``grids``
        ``{method: [index array per explanation]}`` — the grid images of ``direction``
        (RDX's no-change group is not a grid, so it is not marked).
    """
    if direction not in DIRECTIONS:
        raise RDXInputError(f"direction must be one of {DIRECTIONS}, not {direction!r}.")
    if view.A is None or view.B is None:
        raise RDXInputError(f"{view.name}: no representations.npz; re-run the "
                            "comparison (`rdx run --config ...`), which saves it.")
    coords, var = {}, {}
    to_2d = mds_coordinates if _is_distances(view) else pca_coordinates
    for side, X in (("a", view.A), ("b", view.B)):
        coords[side], var[side] = to_2d(X)
    grids = OrderedDict()
    for m in grid_methods(view, direction, methods):
        grids[m] = [np.asarray(e["images"], dtype=np.int64)
                    for e in view.methods[m]["directions"][direction]["explanations"]]
    labels = view.labels
    return {"coords": coords, "variance": var, "grids": grids,
            "labels": None if labels is None else np.asarray(labels)}


def overlay_layout(n_methods: int, max_columns: int = 3) -> tuple[int, int]:
    """(columns, blocks of two rows) of an overlay of ``n_methods`` panels: at most
    ``max_columns`` per row, the rows as evenly filled as possible (5 methods → 3 + 2)."""
    n = max(int(n_methods), 1)
    nblock = -(-n // max(int(max_columns), 1))
    return -(-n // nblock), nblock


def pca_overlay_figure(view: ComparisonView, direction: str, *,
                       methods: Sequence[str] | None = None, max_columns: int = 3) -> Figure:
    """The figure of :func:`pca_overlay` (scatter artists of grid images carry the gid
    ``grid:<method>:<model>:<explanation number>``)."""
    pts = pca_overlay_points(view, direction, methods)
    if not pts["grids"]:
        raise RDXInputError(f"no method of {view.name} has grids for "
                            f"{direction}; nothing to overlay.")
    names = model_names(view.run)
    class_names = list((view.images or {}).get("class_names") or [])
    labels = pts["labels"]
    if labels is not None:
        uniq = np.unique(labels)
        pal = class_colors(len(uniq))
        lut = {u: pal[i] for i, u in enumerate(uniq)}
        point_colors = np.array([lut[v] for v in labels])
    else:
        uniq, lut, point_colors = np.array([]), {}, np.full((len(pts["coords"]["a"]), 3), 0.5)
    n = len(pts["coords"]["a"])
    alpha = float(np.clip(0.1 * np.sqrt(1000 / max(n, 1)), 0.1, 0.4))
    mlist = list(pts["grids"])
    ncol, nblock = overlay_layout(len(mlist), max_columns)
    panel = 3.6
    fig = Figure(figsize=(panel * ncol + 0.8, panel * 2 * nblock + 1.6))
    gs = fig.add_gridspec(2 * nblock, ncol)
    for i, m in enumerate(mlist):
        blk, c = divmod(i, ncol)
        color = method_color(m, view.methods[m].get("method"))
        for r, side in enumerate(("a", "b")):
            ax = fig.add_subplot(gs[2 * blk + r, c])
            xy = pts["coords"][side]
            ax.scatter(xy[:, 0], xy[:, 1], s=8 if n > 1000 else 16, c=point_colors, alpha=alpha,
                       linewidths=0,
                       rasterized=True, gid="background")
            for j, g in enumerate(pts["grids"][m], start=1):
                ax.scatter(xy[g, 0], xy[g, 1], s=52, marker=MARKERS[(j - 1) % len(MARKERS)],
                           color=GRID_MARKER_FACE, edgecolors=GRID_MARKER_EDGE,
                           linewidths=0.9, zorder=3, label=f"#{j}", gid=f"grid:{m}:{side}:{j}")
            ax.set_xticks([])
            ax.set_yticks([])
            for sp in ax.spines.values():
                sp.set_edgecolor(color)
                sp.set_linewidth(2.0)
            if r == 0:
                ax.set_title(m, color=darker(color), fontsize=FONT_HEADING, fontweight="bold")
                ax.legend(fontsize=FONT_NOTE, loc="best", framealpha=0.7, handletextpad=0.2,
                          borderpad=0.3, title="grid", title_fontsize=FONT_NOTE)
            ev = pts["variance"][side]
            ax.set_ylabel(f"{names[side]}\nPC2 ({100 * ev[1]:.0f}%)" if c == 0
                          else f"PC2 ({100 * ev[1]:.0f}%)", fontsize=FONT_LABEL)
            ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}%)", fontsize=FONT_NOTE)
    if labels is not None and len(uniq) <= 20:
        handles = [Line2D([], [], marker="o", linestyle="", color=lut[u], markersize=7,
                          label=(class_names[int(u)] if 0 <= int(u) < len(class_names)
                                 else str(u))) for u in uniq]
        fig.legend(handles=handles, loc="lower center", ncol=min(len(uniq), 10),
                   fontsize=FONT_LABEL,
                   title="class (background points; black markers: grid images)",
                   title_fontsize=FONT_LABEL, bbox_to_anchor=(0.5, -0.005))
    fig.suptitle(f"{view.name} — grid images of {DIRECTION_LABELS[direction]}; "
                 "PCA of each model fitted separately", fontsize=FONT_HEADING)
    fig.tight_layout(rect=(0, 0.5 / fig.get_figheight() + 0.03, 1, 0.97))
    return fig


def pca_overlay(view: ComparisonView, direction: str, out_path: str | Path, *,
                methods: Sequence[str] | None = None, max_columns: int = 3,
                dpi: int = 150) -> Path:
    """2-D PCA of each model (rows A, B) with all images coloured by class (alpha 0.1) and
    each method's grid images of ``direction`` overlaid (one panel pair per method, framed
    in the method's colour; black markers, one shape per explanation).

    ``view``: the comparison (:func:`~rdx.results.comparison_view.read_comparison_view`);
    ``methods``: the methods to show (default: every method with grids, RDX first);
    ``max_columns``: methods per row (3 keeps the panels readable at page width).
    The PCA is of the original (unmapped) representations — the ones the grids are scored
    on — also in aligned runs (the original script plotted the mapped ones there).
    The background points' opacity is 0.1 (as in the original) from 1000 images up and
    rises for fewer images (up to 0.4), so that the classes stay visible in small runs.
    Returns ``out_path``.
    """
    return save_figure(pca_overlay_figure(view, direction, methods=methods,
                                          max_columns=max_columns), out_path, dpi=dpi)


__all__ = ["overlay_layout", "pca_coordinates", "pca_overlay", "pca_overlay_figure",
           "pca_overlay_points"]
