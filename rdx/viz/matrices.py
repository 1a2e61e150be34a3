"""RDX's intermediate matrices (``<method>/graphs.npz`` of a method run with
``save_graphs: true``): neighbour ranks in each model, the difference matrices in each
direction's sign, and difference and affinity reordered by cluster with each cluster's
block outlined.

The functions take the matrices themselves (read them with
:func:`rdx.results.comparison_view.require_graphs`).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..results.types import DIRECTIONS
from .labels import DIRECTION_LABELS
from .save import save_formats
from .style import FONT_NOTE, FONT_SMALL, FONT_SUPTITLE, FONT_TITLE


def cluster_order(labels: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Order that groups images by cluster label (ascending, stable within a cluster).

    Returns
    -------
    order : (n,) int array
        ``labels[order]`` is sorted; within a cluster the images keep their original order.
    blocks : list of (label, start, stop)
        The rows ``start:stop`` of the reordered matrix that belong to ``label``.
    """
    labels = np.asarray(labels)
    order = np.argsort(labels, kind="stable")
    blocks, start = [], 0
    for lab, cnt in zip(*np.unique(labels, return_counts=True)):
        blocks.append((int(lab), start, start + int(cnt)))
        start += int(cnt)
    return order, blocks


def reorder_by_cluster(M: np.ndarray, labels: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """``M[order][:, order]`` with :func:`cluster_order`, and the order and blocks."""
    order, blocks = cluster_order(labels)
    return np.asarray(M)[np.ix_(order, order)], order, blocks
def _matrix_panel(fig: Figure, ax, M: np.ndarray, *, cmap: str, title: str,
                  diverging: bool = False, log: bool = False, label: str = "") -> None:
    kw: dict[str, Any] = {}
    if diverging:
        lim = float(np.nanmax(np.abs(M))) or 1.0
        kw["norm"] = mcolors.TwoSlopeNorm(0.0, -lim, lim)
    elif log:
        lo, hi = float(np.nanmin(M)), float(np.nanmax(M))
        if lo > 0 and hi / lo > 100:   # affinities span orders of magnitude
            kw["norm"] = mcolors.LogNorm(lo, hi)
    im = ax.imshow(M, cmap=cmap, interpolation="nearest", aspect="equal", **kw)
    ax.set_title(title, fontsize=FONT_TITLE)
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03)
    cb.ax.tick_params(labelsize=FONT_SMALL)
    if label:
        cb.set_label(label, fontsize=FONT_NOTE)


def _thinned(centres: Sequence[float], span: float, length_pt: float,
             fontsize: float) -> list[bool]:
    """Which of the (ascending) label positions to keep so that no two kept labels are
    closer than one text line (``fontsize`` · 1.4 points) on an axis ``length_pt`` points
    long showing ``span`` data units; the first label is always kept."""
    gap = span * 1.4 * fontsize / max(length_pt, 1.0)
    keep, last = [], -np.inf
    for c in centres:
        ok = c - last >= gap
        keep.append(bool(ok))
        if ok:
            last = c
    return keep


def _block_name(lab: int, size: int, with_size: bool) -> str:
    name = "no change" if lab == 0 else f"#{lab}"
    return f"{name} ({size})" if with_size else name


def _outline_blocks(ax, blocks: list[tuple[int, int, int]], *, offset: int = 0) -> None:
    """Magenta outlines around the clusters' diagonal blocks (``offset``: the first row of
    the panel in block coordinates)."""
    for lab, s, e in blocks:
        ax.add_patch(Rectangle((s - offset - 0.5, s - offset - 0.5), e - s, e - s, fill=False,
                               edgecolor="magenta", linewidth=1.2, gid=f"block:{lab}"))


def _label_blocks(ax, blocks: list[tuple[int, int, int]], *, offset: int = 0,
                  fontsize: float = 7, with_size: bool = False) -> None:
    """One tick label per block, from the axes' current size: labels that would overlap
    their neighbour (blocks a few pixels wide) are left out — the outlines stay."""
    fig = ax.figure
    bbox = ax.get_position()
    length_pt = min(bbox.width * fig.get_figwidth(), bbox.height * fig.get_figheight()) * 72
    span = float(max(e for _, _, e in blocks) - offset)
    centres = [(s + e - 1) / 2 - offset for _, s, e in blocks]
    keep = _thinned(centres, span, length_pt, fontsize)
    ticks = [c for c, k in zip(centres, keep) if k]
    names = [_block_name(lab, e - s, with_size) for (lab, s, e), k in zip(blocks, keep) if k]
    ax.set_xticks(ticks, names, rotation=90, fontsize=fontsize)
    ax.set_yticks(ticks, names, fontsize=fontsize)


def direction_difference(graphs: Mapping[str, np.ndarray], direction: str) -> np.ndarray:
    """The difference matrix in the sign of ``direction``: negative = the pair is closer in
    the direction's tight model (its affinity is ``exp(−β·diff)``).

    ``graphs.npz`` stores ``diff_a_over_b`` (and, aligned, ``diff_b_over_a_graph`` with the
    same a_over_b sign), so ``b_over_a`` is its negation.
    """
    if direction == "a_over_b":
        return graphs["diff_a_over_b"]
    return -graphs.get("diff_b_over_a_graph", graphs["diff_a_over_b"])


def intermediate_matrices(graphs: Mapping[str, np.ndarray], out_dir: str | Path, *,
                          comparison: str, method: str,
                          formats: Sequence[str] = ("png",)) -> list[Path]:
    """Figures of RDX's intermediate matrices ``graphs`` (the arrays of a method's
    ``graphs.npz``: ``rank_a``, ``rank_b``, ``diff_a_over_b``, ``affinity_<direction>``,
    ``labels_<direction>``) of method ``method`` in comparison ``comparison``.

    Writes into ``out_dir`` (prefixed ``<comparison>_<method>_``): ``ranks.png`` (neighbour
    ranks in A and in B, images in selection order), ``differences.png`` (bwr, each
    direction in its own sign) and ``clusters_<direction>.png``
    (difference and affinity reordered by the direction's cluster labels, magenta outlines
    around each cluster's block, label 0 = no-change group), in each of ``formats``.
    Returns the paths.
    """
    g = graphs
    comp = comparison
    out_dir = Path(out_dir)
    prefix = f"{comp}_{method}_"
    paths = []
    fig = Figure(figsize=(11.0, 4.6))
    for k, side in enumerate(("a", "b")):
        ax = fig.add_subplot(1, 2, k + 1)
        _matrix_panel(fig, ax, g[f"rank_{side}"], cmap="viridis",
                      title=f"neighbour ranks in {side.upper()}",
                      label="rank of column in row's neighbour list")
        ax.set_xlabel("image (selection order)")
        ax.set_ylabel("image")
    fig.suptitle(f"{comp} · {method}: rank matrices", fontsize=FONT_SUPTITLE)
    fig.tight_layout()
    paths += save_formats(fig, out_dir / f"{prefix}ranks", formats)
    fig = Figure(figsize=(11.0, 4.6))
    for k, d in enumerate(DIRECTIONS):
        ax = fig.add_subplot(1, 2, k + 1)
        _matrix_panel(fig, ax, direction_difference(g, d), cmap="bwr", diverging=True,
                      title=f"difference, {DIRECTION_LABELS[d]}",
                      label="< 0: closer in the tight model")
        ax.set_xlabel("image (selection order)")
        ax.set_ylabel("image")
    fig.suptitle(f"{comp} · {method}: difference matrices", fontsize=FONT_SUPTITLE)
    fig.tight_layout()
    paths += save_formats(fig, out_dir / f"{prefix}differences", formats)
    for d in DIRECTIONS:
        paths += save_formats(cluster_matrices_figure(g, d, title=f"{comp} · {method} · "
                                                                   f"{DIRECTION_LABELS[d]}"),
                               out_dir / f"{prefix}clusters_{d}", formats)
    return paths


def cluster_matrices_figure(graphs: Mapping[str, np.ndarray], direction: str, *,
                            title: str = "") -> Figure:
    """Difference and affinity of one direction reordered by cluster (top row, the whole
    matrix with the no-change group) and, when the direction has explanations, the same two
    zoomed on the explanation clusters alone (bottom row: the no-change group, usually
    most of the images, left out so that clusters of a few dozen images fill the panel).
    Block labels that would overlap are left out (the outlines stay)."""
    labels = graphs[f"labels_{direction}"]
    mats = ((direction_difference(graphs, direction), {"cmap": "bwr", "diverging": True},
             "difference"),
            (graphs[f"affinity_{direction}"], {"cmap": "viridis", "log": True}, "affinity"))
    order, blocks = cluster_order(labels)
    explained = [b for b in blocks if b[0] != 0]
    zoom = bool(explained) and any(b[0] == 0 and b[2] > b[1] for b in blocks)
    nrow = 2 if zoom else 1
    fig = Figure(figsize=(11.0, 4.9 * nrow))
    panels = []
    for k, (M, kw, ttl) in enumerate(mats):
        R = np.asarray(M)[np.ix_(order, order)]
        ax = fig.add_subplot(nrow, 2, k + 1)
        _matrix_panel(fig, ax, R, title=f"{ttl} reordered by cluster", **kw)
        _outline_blocks(ax, blocks)
        panels.append((ax, blocks, 0, False))
        if zoom:
            start = explained[0][1]
            ax = fig.add_subplot(nrow, 2, k + 3)
            _matrix_panel(fig, ax, R[start:, start:],
                          title=f"{ttl}: explanation clusters only (zoom)", **kw)
            ax.set_gid("zoom")
            _outline_blocks(ax, explained, offset=start)
            panels.append((ax, explained, start, True))
    if title:
        fig.suptitle(title + ("  (bottom: the no-change group left out)" if zoom else ""),
                     fontsize=FONT_SUPTITLE)
    # labels are thinned for the panels' final size: lay out, label, lay out again
    fig.tight_layout()
    for ax, blks, start, with_size in panels:
        _label_blocks(ax, blks, offset=start, with_size=with_size)
    fig.tight_layout()
    return fig


__all__ = ["cluster_matrices_figure", "cluster_order", "direction_difference",
           "intermediate_matrices", "reorder_by_cluster"]
