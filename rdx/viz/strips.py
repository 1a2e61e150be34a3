"""Every method's explanations of one comparison in one figure: the summary strips (the
grids of a direction side by side), one row per method, one column per direction."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..errors import RDXInputError
from ..results.comparison_view import ComparisonView
from ..results.types import DIRECTIONS
from .labels import DIRECTION_LABELS, model_names
from .methods import grid_methods
from .save import save_figure
from .style import FONT_HEADING, FONT_TITLE, darker, method_color


def cluster_summary_strips(view: ComparisonView,
                           strips: Mapping[tuple[str, str], np.ndarray],
                           out_path: str | Path) -> Path:
    """The summary strips of every method with grids in one figure.

    Parameters
    ----------
    view : ComparisonView
        The comparison (its methods, their order and colours, the models' names).
    strips : mapping
        ``{(method, direction): RGB array}``, the strips to show
        (:func:`rdx.results.comparison_view.read_summary_strips`); a missing one is drawn
        as "no grids".
    out_path : path
        Where to write the figure.

    Returns
    -------
    Path
        ``out_path``.
    """
    mlist = grid_methods(view)
    if not mlist:
        raise RDXInputError(f"{view.name}: no method with explanation grids (only scores such "
                            "as cka/classification?); nothing to summarise.")
    # width of a column ∝ its widest strip, so strips keep their aspect ratio
    aspect = {d: max([s.shape[1] / s.shape[0] for (m, dd), s in strips.items()
                      if dd == d and m in mlist] or [1.0]) for d in DIRECTIONS}
    row_h = 1.6
    fig = Figure(figsize=(row_h * sum(aspect.values()) + 2.0, row_h * len(mlist) + 0.8))
    gs = fig.add_gridspec(len(mlist), 2, width_ratios=[aspect[d] for d in DIRECTIONS],
                          wspace=0.04, hspace=0.12)
    names = model_names(view.run)
    for i, m in enumerate(mlist):
        color = method_color(m, view.methods[m].get("method"))
        for j, d in enumerate(DIRECTIONS):
            ax = fig.add_subplot(gs[i, j])
            ax.set_xticks([])
            ax.set_yticks([])
            s = strips.get((m, d))
            if s is not None:
                ax.imshow(s, aspect="equal")
                ax.set_xlim(-0.5, s.shape[0] * aspect[d] - 0.5)
            else:
                ax.text(0.5, 0.5, "no grids", ha="center", va="center", transform=ax.transAxes,
                        color="0.4")
            for sp in ax.spines.values():
                sp.set_visible(False)
            if j == 0:
                ax.set_ylabel(m, rotation=0, ha="right", va="center", fontsize=FONT_TITLE,
                              color=darker(color), fontweight="bold")
            if i == 0:
                ax.set_title(f"{DIRECTION_LABELS[d]}\n({names[d[0]]})", fontsize=FONT_TITLE)
    fig.suptitle(f"{view.name}: explanations of every method", fontsize=FONT_HEADING)
    return save_figure(fig, out_path, dpi=200)   # keeps the grids' pixels legible


__all__ = ["cluster_summary_strips"]
