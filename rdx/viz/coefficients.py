"""Heat maps of a factorisation baseline's concepts: its codes ``U`` (images × shown
concepts, images sorted by class) and its dictionary ``V`` (shown concepts × feature
dimensions), from the arrays of its ``concepts.npz``
(:func:`rdx.results.comparison_view.require_concepts` reads them)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.figure import Figure

from ..errors import RDXInputError
from .labels import DIRECTION_SHORT
from .save import save_formats
from .style import FONT_NOTE, FONT_SMALL, FONT_SUPTITLE, FONT_TITLE, darker, method_color


def coefficient_heatmaps(concepts: Mapping[str, np.ndarray], out_dir: str | Path, *,
                         comparison: str, method: str, labels: np.ndarray | None = None,
                         class_names: Sequence[str] = (),
                         formats: Sequence[str] = ("png",)) -> list[Path]:
    """Heat maps of a baseline's concept codes ``U`` (``a_codes``, ``b_codes``: n×k of the
    shown concepts), images sorted by class (class boundaries drawn), and of its
    dictionary ``V`` (k×d) when it has one.

    Parameters
    ----------
    concepts : mapping
        The arrays of the method's ``concepts.npz`` (``<side>_codes``, optionally
        ``<side>_concepts`` and ``<side>_dictionary``).
    out_dir : path
        Folder of the figures.
    comparison, method : str
        Names for the titles and the file names.
    labels : ndarray, optional
        Class of every image (sorts the rows); ``class_names`` names the classes.
    formats : sequence of str
        ``png``, ``pdf``, ``svg``.

    Returns
    -------
    list of Path
        ``<comparison>_<method>_coeffs.<fmt>`` (and ``..._dictionary.<fmt>``).
    """
    arr = concepts
    sides = [s for s in ("a", "b") if f"{s}_codes" in arr]
    if not sides:
        raise RDXInputError(f"{method}/concepts.npz holds no codes (a_codes/b_codes): "
                            f"{method!r} is not a per-model concept baseline.")
    class_names = list(class_names or [])
    comp = comparison
    out_dir = Path(out_dir)
    color = method_color(method)
    paths = []
    fig = Figure(figsize=(3.6 * len(sides) + 0.6, 6.0))
    for k, s in enumerate(sides):
        U = arr[f"{s}_codes"]
        ax = fig.add_subplot(1, len(sides), k + 1)
        if labels is not None and len(labels) == len(U):
            # by class, then by the dominant concept, so that class structure shows
            order = np.lexsort((np.argmax(U, axis=1), labels))
            lab = labels[order]
            cuts = np.flatnonzero(np.diff(lab)) + 1
        else:
            order, lab, cuts = np.arange(len(U)), None, np.array([], dtype=int)
        lim = float(np.abs(U).max()) or 1.0
        diverging = float(U.min()) < 0
        im = ax.imshow(U[order], aspect="auto", interpolation="nearest",
                       cmap="RdBu_r" if diverging else "magma",
                       norm=mcolors.TwoSlopeNorm(0.0, -lim, lim) if diverging else None)
        for c in cuts:
            ax.axhline(c - 0.5, color="white" if not diverging else "black", linewidth=0.8)
        shown = arr.get(f"{s}_concepts")
        ax.set_xticks(range(U.shape[1]),
                      [f"c{int(c)}" for c in shown] if shown is not None
                      else [str(i) for i in range(U.shape[1])], fontsize=FONT_NOTE)
        if lab is not None:
            starts = np.concatenate([[0], cuts])
            stops = np.concatenate([cuts, [len(lab)]])
            ax.set_yticks((starts + stops - 1) / 2,
                          [class_names[int(lab[a])] if 0 <= int(lab[a]) < len(class_names)
                           else str(lab[a]) for a in starts], fontsize=FONT_SMALL)
        else:
            ax.set_ylabel("image")
        ax.set_xlabel("concept")
        d = "a_over_b" if s == "a" else "b_over_a"
        ax.set_title(f"codes U, model {s.upper()} ({DIRECTION_SHORT[d]} concepts)",
                     fontsize=FONT_TITLE)
        fig.colorbar(im, ax=ax, fraction=0.08, pad=0.04).ax.tick_params(labelsize=FONT_SMALL)
    fig.suptitle(f"{comp} · {method}: concept coefficients (images sorted by class)",
                 fontsize=FONT_SUPTITLE, color=darker(color))
    fig.tight_layout()
    paths += save_formats(fig, out_dir / f"{comp}_{method}_coeffs", formats)
    dsides = [s for s in sides if f"{s}_dictionary" in arr]
    if dsides:
        fig = Figure(figsize=(10.0, 1.6 * len(dsides) + 1.2))
        for k, s in enumerate(dsides):
            V = arr[f"{s}_dictionary"]
            ax = fig.add_subplot(len(dsides), 1, k + 1)
            lim = float(np.abs(V).max()) or 1.0
            im = ax.imshow(V, aspect="auto", interpolation="nearest", cmap="RdBu_r",
                           norm=mcolors.TwoSlopeNorm(0.0, -lim, lim))
            ax.set_ylabel(f"{s.upper()} concept", fontsize=FONT_NOTE)
            shown = arr.get(f"{s}_concepts")
            if shown is not None:
                ax.set_yticks(range(len(shown)), [f"c{int(c)}" for c in shown], fontsize=FONT_SMALL)
            fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01).ax.tick_params(labelsize=FONT_SMALL)
        ax.set_xlabel("feature dimension")
        fig.suptitle(f"{comp} · {method}: dictionary V (one row per shown concept)",
                     fontsize=FONT_SUPTITLE)
        fig.tight_layout()
        paths += save_formats(fig, out_dir / f"{comp}_{method}_dictionary", formats)
    return paths


__all__ = ["coefficient_heatmaps"]
